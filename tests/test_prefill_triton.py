"""Triton prefill kernels against the float32 reference: the device plan, latent decompression (gather, then
cuBLAS; FP8 caches), ragged MLA prefill attention under every mask with its LSE, and the chunked driver.
CPU tier under the interpreter at tiny sizes; the gpu tier at DeepSeek-V3 sizes."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from pagedmla import ops, quantize_kv_cache
from pagedmla.configs.prefill import DecompressConfig, PrefillConfig
from pagedmla.masks import mask_code
from pagedmla.ops import _triton_prefill
from pagedmla.reference.attention import merge_states
from pagedmla.testing import adversarial_lengths, assert_close, assert_close_to_reference, make_paged_batch
from test_reference import _dequantized_by_hand

MASKS = [("null", -1), ("causal", -1), ("sliding_window_causal", 5), ("sliding_window_noncausal", 7),
         ("chunked", 4), ("chunked_causal", 6)]
ATOL32 = 2e-5  # float32 math against the float32 reference (measured errors are ~1e-6)


def _randn(*shape, dtype=torch.float32, device="cpu", seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g)).to(dtype).to(device)


def _batch(page_size, *, head_size=80, dtype=torch.float32, device="cpu", lengths=None, seed=0):
    """Cached prefixes and new tokens from the adversarial lengths: empty, one-token and page-edge sequences."""
    adv = adversarial_lengths(page_size)
    cached, new = lengths or (list(reversed(adv)) + [0], adv + [1])
    return make_paged_batch(cached, new, head_size=head_size, page_size=page_size, dtype=dtype, device=device,
                            seed=seed)


def _nan(*shape, dtype=torch.float32, device="cpu"):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def _buffer_for(pb, chunks=3):
    """A buffer size that cuts the batch's page-aligned rows into `chunks` chunks (at least one page)."""
    ps = pb.kv.page_size
    line = sum(-(-t // ps) * ps for t in pb.totals)
    return max(ps, -(-line // chunks))


def _float32_twin(kv):
    return kv.replace(blocks=kv.blocks.float(), params=dataclasses.replace(kv.params, dtype=torch.float32))


def _dequantized(kv, dtype):
    """An FP8 cache dequantized (x[d] * scale[d // G]) into a `dtype` cache."""
    group = kv.params.head_size // kv.scales.shape[-1]
    rows = (kv.blocks.float() * kv.scales.repeat_interleave(group, dim=-1)).to(dtype)
    params = dataclasses.replace(kv.params, dtype=dtype, quantization_granularity=None)
    return kv.replace(blocks=rows, params=params, scales=None)


# ---- plan -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page_size,buffer_size", [pytest.param(p, s, id=f"ps{p}-buf{s}") for p, s in
                                                   ((1, 7), (3, 16), (16, 40), (16, 1000))])
def test_plan(page_size, buffer_size):
    pb = _batch(page_size)
    got = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, buffer_size, 20, backend="triton")
    want = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, buffer_size, 20, backend="reference")
    for name, g, w in zip(("buffer_row_offsets", "cache_offsets", "buffer_lengths"), got, want):
        assert g.dtype == torch.int32 and torch.equal(g, w), f"{name}: {g} != {w}"


def test_plan_worked_example_and_wide_batch():
    """SPEC's worked example, then a batch wider than one kernel block (130 sequences) and many chunks."""
    pb = make_paged_batch([0, 0], [160, 200], page_size=128, head_size=16)
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 256, 4, backend="triton")
    assert bro[0].tolist() == [0, 256, 256] and bro[1].tolist() == [0, 0, 256] and co[1].tolist() == [256, 0]
    assert lengths.tolist() == [256, 256, -1, -1]
    pb = make_paged_batch([i % 5 for i in range(130)], [i % 7 for i in range(130)], page_size=2, head_size=16)
    got = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 13, 60, backend="triton")
    want = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 13, 60, backend="reference")
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_plan_too_many_chunks_is_an_error():
    pb = _batch(3)
    with pytest.raises(ValueError, match="max_chunks"):
        ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 4, 2, backend="triton")


# ---- decompression ------------------------------------------------------------------------------------------------

def _decompress_both(pb, kv, weight, config=None):
    """Every chunk of the plan through the kernel and the reference; buffers start as NaN."""
    buffer_size = _buffer_for(pb)
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, kv, buffer_size, 16, backend="reference")
    rank, width = weight.shape[1], weight.shape[0]
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        got_lat, got_k = _nan(buffer_size, rank, dtype=weight.dtype), _nan(buffer_size, width, dtype=weight.dtype)
        want_lat, want_k = got_lat.clone(), got_k.clone()
        _triton_prefill.mla_decompress_k_cache_ragged_paged(
            bro[c], co[c], length, weight, kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales,
            kv.params.quantization_granularity or 0, 1, got_lat, got_k, config)
        ops.mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, weight, kv, 1, want_lat, want_k,
                                                backend="reference")
        yield c, (got_lat, want_lat), (got_k, want_k)


@pytest.mark.parametrize("page_size,config", [pytest.param(1, None, id="ps1"), pytest.param(3, None, id="ps3"),
                                              pytest.param(16, DecompressConfig(gather_rows=32), id="ps16-32rows")])
def test_decompress(page_size, config):
    pb = _batch(page_size)
    weight = _randn(3 * 32, 64, seed=2, scale=0.2)
    for c, (lat, want_lat), (kb, want_kb) in _decompress_both(pb, pb.kv, weight, config):
        # the gathered latent rows are copies (NaN rows of page tails included); rows past the length stay NaN
        assert_close(lat, want_lat, atol=0, name=f"k_latent_buffer chunk {c}")
        assert_close(kb, want_kb, atol=ATOL32, rtol=1e-5, name=f"k_buffer chunk {c}")


@pytest.mark.parametrize("granularity", [16, 48])
def test_decompress_fp8_cache(granularity):
    """FP8 e4m3 rows dequantize while gathering: element d times scale[d // G] (48 does not divide the row)."""
    pb = _batch(16)
    kv = quantize_kv_cache(pb.kv, granularity)
    weight = _randn(2 * 32, 64, seed=3, scale=0.2)
    for c, (lat, want_lat), (kb, want_kb) in _decompress_both(pb, kv, weight):
        assert_close(lat, want_lat, atol=1e-6, rtol=1e-6, name=f"k_latent_buffer chunk {c}")
        assert_close(kb, want_kb, atol=ATOL32, rtol=1e-5, name=f"k_buffer chunk {c}")


def test_decompress_fp8_cache_into_bf16():
    """Dequantized FP8 rows round to nearest into bf16 buffers, as the reference does (the interpreter's own
    float32 -> bf16 conversion truncates: the kernel rounds through `fp8._cast`)."""
    pb = _batch(16)
    kv = quantize_kv_cache(pb.kv, 16)
    weight = _randn(2 * 32, 64, seed=3, scale=0.2).to(torch.bfloat16)
    for c, (lat, want_lat), (kb, want_kb) in _decompress_both(pb, kv, weight):
        assert_close(lat, want_lat, atol=0, name=f"k_latent_buffer chunk {c}")
        assert_close(kb, want_kb, atol=0, name=f"k_buffer chunk {c}")


def test_decompress_rope_aware_cache():
    """The rope-aware FP8 row (e4m3 latent with one scale per row, then bf16 rope bytes) decompresses like the
    plain cache it dequantizes to: its latent columns times the row's scale (the rope bytes are not gathered)."""
    pb = _batch(16, head_size=80)
    kv = quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=16)
    plain = pb.kv.replace(blocks=_dequantized_by_hand(kv.blocks, kv.scales, rope=16))
    weight = _randn(2 * 32, 64, seed=5, scale=0.2)
    for (c, (lat, want_lat), (kb, want_kb)), (_, (lat_p, _), _) in zip(_decompress_both(pb, kv, weight),
                                                                    _decompress_both(pb, plain, weight)):
        assert_close(lat, want_lat, atol=1e-6, rtol=1e-6, name=f"k_latent_buffer chunk {c}")
        assert_close(want_lat, lat_p, atol=0, name=f"k_latent_buffer chunk {c}, against the dequantized cache")
        assert_close(kb, want_kb, atol=ATOL32, rtol=1e-5, name=f"k_buffer chunk {c}")


def test_decompress_public_op_and_empty_length():
    pb = _batch(3)
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 64, 4, backend="reference")
    weight = _randn(64, 64, seed=4, scale=0.2)
    lat, kb = _nan(64, 64), _nan(64, 64)
    ops.mla_decompress_k_cache_ragged_paged(bro[1], co[1], -1, weight, pb.kv, 1, lat, kb, backend="triton")
    assert torch.isnan(lat).all() and torch.isnan(kb).all()
    ops.mla_decompress_k_cache_ragged_paged(bro[0], co[0], int(lengths[0]), weight, pb.kv, 1, lat, kb,
                                            backend="triton")
    want_lat, want_kb = _nan(64, 64), _nan(64, 64)
    ops.mla_decompress_k_cache_ragged_paged(bro[0], co[0], int(lengths[0]), weight, pb.kv, 1, want_lat, want_kb,
                                            backend="reference")
    assert_close(lat, want_lat, atol=0, name="k_latent_buffer")
    assert_close(kb, want_kb, atol=ATOL32, rtol=1e-5, name="k_buffer")


# ---- prefill attention -----------------------------------------------------------------------------------------


def _attend_all_chunks(pb, kv, q, k_buffer, nope, buffer_size, mask, window, backend, config=None, scale=0.3):
    """(out, lse) of every chunk of the plan; k and v are strided views of one k_buffer, as in mla_prefill."""
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, kv, buffer_size, 16, backend="reference")
    results = []
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        k, v = k_buffer[c, ..., :nope], k_buffer[c, ..., nope:]
        out = _nan(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
        if backend == "triton" and config is not None:
            lse = _nan(q.shape[0], q.shape[1])
            _triton_prefill.mla_prefill_kv_cache_ragged(
                q, k, v, bro[c], co[c], pb.input_row_offsets, kv.blocks, kv.cache_lengths, kv.lookup_table,
                kv.scales, kv.params.quantization_granularity or 0, 0, scale, *mask_code(mask, window), out, lse,
                config)
        else:
            out, lse = ops.mla_prefill_kv_cache_ragged(
                q, k, v, bro[c], co[c], pb.input_row_offsets, kv, 0, scale, mask=mask, local_window_size=window,
                output=out, return_lse=True, backend=backend)
        results.append((c, out, lse))
    return results


def _check_prefill(pb, kv, *, heads=2, nope=32, v_dim=32, rope=16, mask="causal", window=-1, config=None,
                   chunks=3, scale=0.3):
    buffer_size = _buffer_for(pb, chunks)
    q = _randn(pb.num_rows, heads, nope + rope, seed=5)
    k_buffer = _randn(3, buffer_size, heads, nope + v_dim, seed=6)
    got = _attend_all_chunks(pb, kv, q, k_buffer, nope, buffer_size, mask, window, "triton", config, scale)
    want = _attend_all_chunks(pb, kv, q, k_buffer, nope, buffer_size, mask, window, "reference", scale=scale)
    assert len(got) >= 2, "the case should span several chunks"
    for (c, out, lse), (_, want_out, want_lse) in zip(got, want):
        assert_close(out, want_out, atol=ATOL32, rtol=1e-5, name=f"output chunk {c}")
        assert_close(lse, want_lse, atol=ATOL32, rtol=1e-5, name=f"lse chunk {c}")


@pytest.mark.parametrize("page_size,mask,window", [pytest.param(p, m, w, id=f"ps{p}-{m}") for p in (1, 3, 16)
                                                   for m, w in MASKS])
def test_prefill_masks(page_size, mask, window):
    pb = _batch(page_size)
    _check_prefill(pb, pb.kv, mask=mask, window=window)


@pytest.mark.parametrize("mask,window", [pytest.param(m, 5 * w + 18 if w > 0 else w, id=m) for m, w in MASKS])
def test_prefill_long_sequences(mask, window):
    """Sequences several key blocks long, so the unmasked interior blocks and the block edges of the mask
    region are exercised (windows of 40 to 53 keys)."""
    pb = _batch(16, lengths=([46, 0, 17, 15], [70, 50, 33, 20]))
    _check_prefill(pb, pb.kv, mask=mask, window=window, chunks=2)


@pytest.mark.parametrize("scale", [-4.0, 0.0])
def test_prefill_scale_that_is_not_positive(scale):
    """Zero and negative scales: at -4 the scaled logits span ~250 in base 2, so a running max taken on the
    unscaled logits (max(s) * scale is max(s * scale) only for scale > 0) would overflow exp2 (checked with
    such a variant: it fails here)."""
    pb = _batch(16, lengths=([46, 0, 17, 15], [70, 50, 33, 20]))
    _check_prefill(pb, pb.kv, mask="causal", chunks=2, scale=scale)


@pytest.mark.parametrize("config", [pytest.param(PrefillConfig(32, 16, 1, 1), id="m32-n16"),
                                    pytest.param(PrefillConfig(16, 32, 1, 1), id="m16-n32"),
                                    pytest.param(PrefillConfig(16, 16, 1, 1, heads_inner=True), id="heads-inner")])
def test_prefill_tiles_and_odd_head_sizes(config):
    """Other tile shapes, the 1-D grid that walks heads first, and head sizes that are not powers of two
    (padded tiles: 24 nope, 20 v, 8 rope)."""
    pb = _batch(3)
    _check_prefill(pb, pb.kv, heads=3, nope=24, v_dim=20, rope=8, mask="sliding_window_causal", window=9,
                   config=config)


def test_prefill_heuristic_grid_order():
    """The heads-first grid only where it measured faster (16 heads), for long and short prompts alike."""
    from pagedmla.configs.prefill import prefill_heuristic
    assert prefill_heuristic(num_heads=16).heads_inner
    assert prefill_heuristic(num_heads=16, rows_per_sequence=1024).heads_inner
    assert not prefill_heuristic(num_heads=128).heads_inner
    assert not prefill_heuristic(num_heads=128, fp8_cache=True).heads_inner


def test_prefill_heuristic_warp_specialized():
    """On Hopper, bf16 caches take the warp-specialized kernel (128-key blocks, 2-deep rings); FP8 caches, other
    GPUs and the interpreter keep the Triton kernel."""
    from pagedmla.configs.prefill import prefill_heuristic
    for heads in (16, 128):
        cfg = prefill_heuristic(num_heads=heads, hopper=True)
        assert cfg.warp_specialized and (cfg.block_n, cfg.num_stages) == (128, 2)
        assert not prefill_heuristic(num_heads=heads, hopper=True, fp8_cache=True).warp_specialized
        assert not prefill_heuristic(num_heads=heads).warp_specialized
    assert not prefill_heuristic(hopper=True, interpret=True).warp_specialized


def test_prefill_warp_specialized_inputs():
    """What the warp-specialized kernel takes: bf16 q [T, H, 192] and k, v [T, H, 128] that TMA can read (views
    of one [T, H, 256] buffer, as the chunked prefill passes them), the null or causal mask, an unscaled bf16
    cache with the rope in its last 64 columns. Everything else runs the Triton kernel."""
    bf = torch.bfloat16
    q = torch.randn(64, 4, 192).to(bf)
    kv = torch.randn(64, 4, 256).to(bf)
    k, v = kv[..., :128], kv[..., 128:]
    blocks = torch.zeros(3, 1, 2, 16, 1, 576, dtype=bf)
    ready = _triton_prefill._ws_ready
    assert ready(q, k, v, blocks, None, mask_code("causal", -1)[0])
    assert ready(q, k, v, blocks, None, mask_code("null", -1)[0])
    assert not ready(q, k, v, blocks, None, mask_code("sliding_window_causal", 8)[0])
    assert not ready(q, k, v, blocks, torch.ones(3, 1, 2, 16, 1, 9), 1)  # FP8 scales
    assert not ready(q.float(), k, v, blocks, None, 1)
    assert not ready(q, k, v, blocks.float(), None, 1)
    assert not ready(q[..., :96], k, v, blocks, None, 1)  # other head sizes
    odd = torch.randn(64, 4, 129).to(bf)[..., :128]  # a row stride TMA cannot take (258 bytes)
    assert not ready(q, odd, v, blocks, None, 1)
    assert not ready(q, k, kv[..., 1:129], blocks, None, 1)  # a base off 16-byte alignment
    # the 2-D view the TMA descriptors read: every head's columns of a row
    view = _triton_prefill._tma_2d(v, 128)
    assert view.shape == (64, 3 * 256 + 128) and view.stride() == (1024, 1)
    assert torch.equal(view[:, 2 * 256: 2 * 256 + 128], v[:, 2])


def test_gather_rope_rows():
    """The rope columns the warp-specialized prefill gathers per buffer row (`_gather_rows` on the cache's last
    16 columns): the cache row at that row's position, for every chunk's valid rows."""
    pb = _batch(3)
    kv = pb.kv
    buffer_size = _buffer_for(pb)
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, kv, buffer_size, 8, backend="reference")
    totals = [c + n for c, n in zip(pb.cache_lengths, pb.new_lengths)]
    checked = 0
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        rope = _nan(buffer_size, 16)
        _triton_prefill._gather_rows(bro[c], co[c], kv.lookup_table, kv.blocks[..., 64:], None, 0, 1, rope,
                                     buffer_size, DecompressConfig(gather_rows=8, gather_warps=1))
        starts, offs = bro[c].tolist(), co[c].tolist()
        for b in range(len(totals)):
            for r in range(starts[b], starts[b + 1]):
                pos = r - starts[b] + offs[b]
                if pos < totals[b]:
                    page = int(kv.lookup_table[b, pos // kv.page_size])
                    assert torch.equal(rope[r], kv.blocks[page, 0, 1, pos % kv.page_size, 0, 64:]), (c, b, r)
                    checked += 1
    assert checked == sum(totals)


def test_prefill_warp_specialized_config_off_hopper():
    """A config that asks for the warp-specialized kernel where it cannot run (the interpreter, float32 inputs)
    runs the Triton kernel with the heuristic's tiles, and gives the reference's answer."""
    pb = _batch(3)
    _check_prefill(pb, pb.kv, config=PrefillConfig(block_m=128, block_n=128, num_warps=4, num_stages=2,
                                                   warp_specialized=True))


def test_prefill_wide_batch():
    """130 sequences: a program finds its sequence over more than one 128-sequence scan block."""
    pb = make_paged_batch([i % 4 for i in range(130)], [(i * 7) % 5 for i in range(130)], head_size=48,
                          page_size=4)
    _check_prefill(pb, pb.kv, heads=1, nope=16, v_dim=16, rope=16, mask="causal", chunks=2)


@pytest.mark.parametrize("granularity", [8, 48])
def test_prefill_fp8_cache_rope(granularity):
    """The rope columns come from an FP8 cache: dequantized with their scales (48: a short last group)."""
    pb = _batch(16)
    _check_prefill(pb, quantize_kv_cache(pb.kv, granularity), mask="causal")


def test_prefill_no_rope_columns():
    """q head size == k head size: nothing is read from the cache."""
    pb = _batch(3)
    _check_prefill(pb, pb.kv, rope=0, mask="chunked_causal", window=5)


# ---- the chunked driver ------------------------------------------------------------------------------------------


def _mla_inputs(page_size, *, heads, nope, rope, v_dim, rank, dtype=torch.float32, device="cpu", lengths=None):
    pb = _batch(page_size, head_size=rank + rope, dtype=dtype, device=device, lengths=lengths)
    q = _randn(pb.num_rows, heads, nope + rope, dtype=dtype, device=device, seed=7)
    weight = _randn(heads * (nope + v_dim), rank, dtype=dtype, device=device, seed=8, scale=rank ** -0.5)
    return pb, q, weight


@pytest.mark.parametrize("page_size,mask,window", [pytest.param(3, "causal", -1, id="ps3-causal"),
                                                   pytest.param(16, "sliding_window_noncausal", 6,
                                                                id="ps16-sliding_window_noncausal")])
def test_mla_prefill_multi_chunk(page_size, mask, window):
    pb, q, weight = _mla_inputs(page_size, heads=2, nope=32, rope=16, v_dim=32, rank=64)
    got = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, 0.25, buffer_size=24, mask=mask,
                          local_window_size=window, return_lse=True, backend="triton")
    want = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, 0.25, buffer_size=24, mask=mask,
                           local_window_size=window, return_lse=True, backend="reference")
    assert_close(got[0], want[0], atol=ATOL32, rtol=1e-5, name="output")
    assert_close(got[1], want[1], atol=ATOL32, rtol=1e-5, name="lse")


def test_mla_prefill_deepseek_sizes():
    """DeepSeek head sizes (576-column rows, q/k 192 = 128 + 64, v 128, kv_lora_rank 512), two heads, two chunks."""
    pb, q, weight = _mla_inputs(16, heads=2, nope=128, rope=64, v_dim=128, rank=512,
                                lengths=([0, 17, 3], [9, 2, 1]))
    scale = 192 ** -0.5
    got = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, scale, buffer_size=32, return_lse=True,
                          backend="triton")
    want = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, scale, buffer_size=32, return_lse=True,
                           backend="reference")
    assert_close(got[0], want[0], atol=ATOL32, rtol=1e-5, name="output")
    assert_close(got[1], want[1], atol=ATOL32, rtol=1e-5, name="lse")


# ---- gpu tier: DeepSeek-V3 sizes ---------------------------------------------------------------------------------

LSE_EPS = 1e-4


def _bf16_step(ref):
    """One bf16 rounding step at the scale of ref's largest value. The kernel rounds P to bf16 before the PV
    product (as FlashAttention does) and stores bf16, so its float32 accumulator and PyTorch's can straddle a
    rounding boundary of the output: one step is allowed on top of 2x PyTorch's own error."""
    top = float(ref.detach().abs().nan_to_num(0.0).max())
    return 2.0 ** (math.floor(math.log2(top)) - 7) if top > 0 else 2.0 ** -7


def _gpu_lengths(page_size):
    """Prefixes in the cache, an empty and a one-token sequence, page edges, and one longer prompt."""
    edge = max(page_size - 1, 1)
    return [0, 300, 0, edge, 129, 1000], [0, 1, 517, page_size + 1, 64, 1]


@pytest.mark.gpu
@pytest.mark.parametrize("heads,page_size", [pytest.param(h, p, id=f"H{h}-ps{p}") for h in (128, 16)
                                             for p in (1, 64, 128)])
def test_gpu_mla_prefill_deepseek(heads, page_size):
    """The whole chunked prefill (plan, decompress, attend, merge) in bf16 against the float32 reference."""
    pb, q, weight = _mla_inputs(page_size, heads=heads, nope=128, rope=64, v_dim=128, rank=512,
                                dtype=torch.bfloat16, device="cuda", lengths=_gpu_lengths(page_size))
    scale = 192 ** -0.5
    got = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, scale, buffer_size=1024, return_lse=True,
                          backend="triton")
    want = ops.mla_prefill(q.float(), pb.input_row_offsets, _float32_twin(pb.kv), 1, weight.float(), scale,
                           buffer_size=1024, return_lse=True, backend="reference")
    low = _bf16_mla_prefill(q, pb, weight, scale, 1024)
    assert_close_to_reference(got[0], want[0], low[0], eps=_bf16_step(want[0]), name="output")
    assert_close_to_reference(got[1], want[1], low[1], eps=LSE_EPS, name="lse")


def _bf16_mla_prefill(q, pb, weight, scale, buffer_size, mask="causal"):
    """PyTorch's own bf16 pipeline of the chunked prefill: each chunk's keys from torch's bf16 GEMM (the
    reference decompression rounds a float32 GEMM instead, which is more exact than any bf16 pipeline), the
    float32 reference attention on them, and the LSE merge of bf16 chunk outputs."""
    nope = q.shape[-1] - (pb.kv.params.head_size - weight.shape[1])
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, buffer_size, 16, backend="reference")
    outs, lses = [], []
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        latent = q.new_empty(buffer_size, weight.shape[1])
        ops.mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, weight, pb.kv, 1, latent,
                                                q.new_empty(buffer_size, weight.shape[0]), backend="reference")
        k_buffer = (latent[:length] @ weight.T).view(length, q.shape[1], -1)
        out, lse = ops.mla_prefill_kv_cache_ragged(q, k_buffer[..., :nope], k_buffer[..., nope:], bro[c], co[c],
                                                   pb.input_row_offsets, pb.kv, 1, scale, mask=mask, return_lse=True,
                                                   backend="reference")
        outs.append(out.float())
        lses.append(lse)
    out, lse = merge_states(outs, lses)
    return out.to(q.dtype), lse


@pytest.mark.gpu
@pytest.mark.parametrize("mask,window,fp8", [pytest.param(m, w, False, id=m) for m, w in MASKS]
                         + [pytest.param("causal", -1, True, id="causal-fp8-cache")])
def test_gpu_prefill_masks_deepseek(mask, window, fp8):
    """Every mask at DeepSeek head sizes, 16 heads, page 64, one chunk, bf16 (and the rope read from an FP8 cache)."""
    pb, q, _ = _mla_inputs(64, heads=16, nope=128, rope=64, v_dim=128, rank=512, dtype=torch.bfloat16,
                           device="cuda", lengths=_gpu_lengths(64))
    kv = quantize_kv_cache(pb.kv, 64) if fp8 else pb.kv
    window = window if window < 0 else 37 * window
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, kv, 4096, 1)
    k_buffer = _randn(int(lengths[0]), 16, 256, dtype=torch.bfloat16, device="cuda", seed=9)
    args = (bro[0], co[0], pb.input_row_offsets)
    kw = dict(mask=mask, local_window_size=window, return_lse=True)
    got = ops.mla_prefill_kv_cache_ragged(q, k_buffer[..., :128], k_buffer[..., 128:], *args, kv, 0, 0.1,
                                          backend="triton", **kw)
    kb32 = k_buffer.float()
    want = ops.mla_prefill_kv_cache_ragged(q.float(), kb32[..., :128], kb32[..., 128:], *args,
                                           kv if fp8 else _float32_twin(kv), 0, 0.1, backend="reference", **kw)
    # PyTorch's own low precision: bf16 keys, FP8 rows dequantized to bf16 as the kernel does before its MMA
    low_kv = _dequantized(kv, torch.bfloat16) if fp8 else kv
    low = ops.mla_prefill_kv_cache_ragged(q, k_buffer[..., :128], k_buffer[..., 128:], *args, low_kv, 0, 0.1,
                                          backend="reference", **kw)
    assert_close_to_reference(got[0], want[0], low[0], eps=_bf16_step(want[0]), name="output")
    assert_close_to_reference(got[1], want[1], low[1], eps=LSE_EPS, name="lse")


@pytest.mark.gpu
@pytest.mark.parametrize("mask", ["causal", "null"])
def test_gpu_prefill_warp_specialized(mask, call_counter):
    """The warp-specialized kernel (Hopper) on long ragged sequences with cached prefixes (1300 new tokens: 11
    query tiles, up to 11 key blocks each), a one-token and an empty sequence, 16 heads, page 64. Every k/v buffer
    row that no valid key uses (page padding between sequences, rows past the chunk) is NaN: the output must not
    see them. Compared with the reference on the clean buffer."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the warp-specialized kernel runs on Hopper only")
    cached, new = [0, 700, 0, 5, 130], [1300, 300, 1, 257, 0]
    pb, q, _ = _mla_inputs(64, heads=16, nope=128, rope=64, v_dim=128, rank=512, dtype=torch.bfloat16,
                           device="cuda", lengths=(cached, new))
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 4096, 1)
    rows = int(lengths[0])
    k_buffer = _randn(rows + 128, 16, 256, dtype=torch.bfloat16, device="cuda", seed=9)
    starts, offs = bro[0].tolist(), co[0].tolist()
    used = torch.zeros(rows + 128, dtype=torch.bool, device="cuda")
    for b in range(len(cached)):
        used[starts[b]: starts[b] + min(starts[b + 1] - starts[b], cached[b] + new[b] - offs[b])] = True
    assert not used.all()
    poisoned = k_buffer.clone()
    poisoned[~used] = float("nan")
    code = mask_code(mask, -1)[0]
    assert _triton_prefill._ws_ready(q, poisoned[..., :128], poisoned[..., 128:], pb.kv.blocks, None, code)
    args = (bro[0], co[0], pb.input_row_offsets)
    launches = call_counter(_triton_prefill, "_launch_ws")
    got = ops.mla_prefill_kv_cache_ragged(q, poisoned[..., :128], poisoned[..., 128:], *args, pb.kv, 1, 0.1,
                                          mask=mask, return_lse=True, backend="triton")
    assert launches == [1], "the warp-specialized kernel did not run"

    kb32 = k_buffer.float()
    want = ops.mla_prefill_kv_cache_ragged(q.float(), kb32[..., :128], kb32[..., 128:], *args, _float32_twin(pb.kv),
                                           1, 0.1, mask=mask, return_lse=True, backend="reference")
    low = ops.mla_prefill_kv_cache_ragged(q, k_buffer[..., :128], k_buffer[..., 128:], *args, pb.kv, 1, 0.1,
                                          mask=mask, return_lse=True, backend="reference")
    assert_close_to_reference(got[0], want[0], low[0], eps=_bf16_step(want[0]), name="output")
    assert_close_to_reference(got[1], want[1], low[1], eps=LSE_EPS, name="lse")


@pytest.mark.gpu
@pytest.mark.parametrize("mask", ["causal", "null"])
def test_gpu_prefill_warp_specialized_short_and_chunked(mask, call_counter):
    """The warp-specialized kernel (Hopper) through `mla_prefill` with a 256-row buffer: several chunks (later
    chunks start past their sequences' first key, outputs in float32), short sequences (fewer rows than a
    64-row half tile), q laid out head-major; page 64, 16 heads, NaN-poisoned unused cache slots."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the warp-specialized kernel runs on Hopper only")
    cached, new = [0, 200, 3, 90], [5, 1, 40, 300]
    pb, q, weight = _mla_inputs(64, heads=16, nope=128, rope=64, v_dim=128, rank=512, dtype=torch.bfloat16,
                                device="cuda", lengths=(cached, new))
    q = q.transpose(0, 1).contiguous().transpose(0, 1)  # head-major: the head stride exceeds the row stride
    scale = 192 ** -0.5
    launches = call_counter(_triton_prefill, "_launch_ws")
    got = ops.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, weight, scale, buffer_size=256, mask=mask,
                          return_lse=True, backend="triton")
    assert launches[0] >= 3, f"expected the warp-specialized kernel on every chunk, got {launches[0]} launches"
    want = ops.mla_prefill(q.float(), pb.input_row_offsets, _float32_twin(pb.kv), 1, weight.float(), scale,
                           buffer_size=256, mask=mask, return_lse=True, backend="reference")
    low = _bf16_mla_prefill(q, pb, weight, scale, 256, mask)
    assert_close_to_reference(got[0], want[0], low[0], eps=_bf16_step(want[0]), name="output")
    assert_close_to_reference(got[1], want[1], low[1], eps=LSE_EPS, name="lse")


@pytest.mark.gpu
def test_gpu_decompress_deepseek():
    """Gather + cuBLAS at 128 heads (k_buffer 32768 wide), every chunk of a three-chunk plan."""
    pb, _, weight = _mla_inputs(64, heads=128, nope=128, rope=64, v_dim=128, rank=512, dtype=torch.bfloat16,
                                device="cuda", lengths=_gpu_lengths(64))
    bro, co, lengths = ops.mla_prefill_plan(pb.input_row_offsets, pb.kv, 1024, 4)
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        lat, kb = _nan(1024, 512, dtype=torch.bfloat16, device="cuda"), _nan(1024, 32768, dtype=torch.bfloat16,
                                                                              device="cuda")
        ops.mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, weight, pb.kv, 1, lat, kb, backend="triton")
        want_lat = _nan(1024, 512, dtype=torch.bfloat16, device="cuda")
        want_kb = _nan(1024, 32768, device="cuda")
        ops.mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, weight.float(), pb.kv, 1,
                                                _nan(1024, 512, device="cuda"), want_kb, backend="reference")
        ops.mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, weight, pb.kv, 1, want_lat,
                                                _nan(1024, 32768, dtype=torch.bfloat16, device="cuda"),
                                                backend="reference")
        assert_close(lat, want_lat, atol=0, name="k_latent_buffer")
        low = (want_lat[:length] @ weight.T).float()
        assert_close_to_reference(kb[:length], want_kb[:length], low, eps=1e-5, name="k_buffer")
        assert torch.isnan(kb[length:]).all() and torch.isnan(lat[length:]).all()
