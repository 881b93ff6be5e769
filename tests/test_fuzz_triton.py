"""Seeded random batches through the Triton kernels (the interpreter on CPU) against the float32 reference.

Each case draws a batch (cached and new lengths, empty sequences, page size), a head count, a mask with its
window, a cache format (float32, plain FP8 at several granularities, the rope-aware row) and, for the dense
decode, a launch config (tile rows and keys, the table prefetch, the split). The hand-picked cases elsewhere
cover each option; these cover their combinations. A failure prints the case, which replays with its seed.
"""

from __future__ import annotations

import random

import pytest
import torch

import pagedmla as pm
from pagedmla.configs.decode import DecodeConfig
from pagedmla.ops import _triton_decode
from pagedmla.ops._dispatch import interpreter_enabled
from pagedmla.testing import assert_close, make_paged_batch

LATENT, ROPE = 64, 16
MASKS = ["null", "causal", "sliding_window_causal", "sliding_window_noncausal", "chunked", "chunked_causal"]

cpu_tier = pytest.mark.skipif(torch.cuda.is_available() and not interpreter_enabled(),
                              reason="interpreter tier (CPU)")


def _mask(rng):
    mask = rng.choice(MASKS)
    return mask, (rng.choice([1, 2, 3, 5, 8]) if "sliding" in mask or "chunked" in mask else -1)


def _cache(pb, kind):
    if kind == "rope-aware":
        return pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=ROPE)
    return pb.kv if kind == "float32" else pm.quantize_kv_cache(pb.kv, kind)


@cpu_tier
@pytest.mark.parametrize("seed", range(40))
def test_dense_decode_random_cases(seed):
    rng = random.Random(seed)
    batch = rng.randint(1, 5)
    cache = [rng.choice([0, 1, 2, 5, 15, 16, 17, 31, 33, 40]) for _ in range(batch)]
    new = [rng.choice([0, 1, 1, 1, 2, 3, 5]) for _ in range(batch)]
    new[0] = max(new[0], 1)
    heads = rng.choice([1, 2, 3, 4, 5, 8, 9])
    mask, window = _mask(rng)
    kind = rng.choice(["float32", 16, 48, 80, "rope-aware"])
    cfg = DecodeConfig(block_m=rng.choice([16, 32, 64]), block_n=rng.choice([16, 32]), num_warps=1, num_stages=1,
                       prefetch_table=rng.random() < 0.5, unmasked_interior=rng.random() < 0.5)
    parts = rng.choice([1, 2, 3, 7])
    sink = torch.randn(heads) if rng.random() < 0.3 else None
    case = dict(cache=cache, new=new, heads=heads, mask=mask, window=window, kind=kind, cfg=cfg, parts=parts,
                sink=sink is not None)
    # page sizes that are multiples of block_n take the one-table-entry-per-block path
    pb = make_paged_batch(cache, new, head_size=LATENT + ROPE, page_size=rng.choice([1, 3, 4, 16, 16, 32]),
                          num_layers=2, seed=seed)
    q = torch.randn(pb.num_rows, heads, LATENT + ROPE, generator=torch.Generator().manual_seed(seed))
    kv = _cache(pb, kind)
    rope_aware = kind == "rope-aware"
    want, want_lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, kv, 1, 0.3, mask=mask,
                                                   local_window_size=window, return_lse=True, attn_sink=sink,
                                                   per_token_scale_rope_aware=rope_aware, qk_rope_head_dim=ROPE,
                                                   backend="reference")
    plan = pm.mla_decode_plan(pb.input_row_offsets, kv, num_heads=heads, num_partitions=parts, backend="triton")
    out = torch.full((q.shape[0], heads, LATENT), float("nan"))
    lse = torch.full((q.shape[0], heads), float("nan"))
    _triton_decode.launch_decode(q, pb.input_row_offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, 1, 0.3,
                                 pm.MASKS[mask], window, out, lse, plan.schedule, max_seq_length=max(new),
                                 qk_rope_head_dim=ROPE, scales=kv.scales,
                                 quant_granularity=kv.params.quantization_granularity or 0, rope_aware=rope_aware,
                                 attn_sink=sink, config=cfg)
    assert_close(out, want, atol=3e-5, rtol=1e-5, name=f"output of {case}")
    assert_close(lse, want_lse, atol=3e-5, rtol=1e-5, name=f"lse of {case}")


@cpu_tier
@pytest.mark.parametrize("seed", range(10))
def test_chunked_prefill_random_cases(seed):
    rng = random.Random(1000 + seed)
    batch = rng.randint(1, 4)
    cached = [rng.choice([0, 0, 1, 3, 7, 16, 20]) for _ in range(batch)]
    new = [rng.choice([0, 1, 2, 5, 9, 17]) for _ in range(batch)]
    new[0] = max(new[0], 3)
    page_size = rng.choice([1, 2, 4, 5, 16])
    heads = rng.choice([1, 2, 3])
    nope, v_dim = rng.choice([(8, 8), (8, 12), (16, 16), (12, 8)])
    mask, window = _mask(rng)
    kind = rng.choice(["float32", "float32", 16, 40])
    kw = dict(buffer_size=max(page_size, rng.choice([4, 5, 8, 16, 33, 4096])), mask=mask, local_window_size=window,
              return_lse=True)
    case = dict(cached=cached, new=new, page_size=page_size, heads=heads, nope=nope, v_dim=v_dim, kind=kind, **kw)
    pb = make_paged_batch(cached, new, head_size=LATENT + ROPE, page_size=page_size, num_layers=2, seed=seed)
    kv = _cache(pb, kind)
    gen = torch.Generator().manual_seed(seed)
    w_kv_b = torch.randn(heads * (nope + v_dim), LATENT, generator=gen) / 8
    q = torch.randn(pb.num_rows, heads, nope + ROPE, generator=gen)
    want, want_lse = pm.mla_prefill(q, pb.input_row_offsets, kv, 1, w_kv_b, 0.3, backend="reference", **kw)
    got, got_lse = pm.mla_prefill(q, pb.input_row_offsets, kv, 1, w_kv_b, 0.3, backend="triton", **kw)
    assert_close(got, want, atol=5e-5, rtol=1e-4, name=f"output of {case}")
    assert_close(got_lse, want_lse, atol=5e-5, rtol=1e-4, name=f"lse of {case}")
