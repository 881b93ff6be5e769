"""torch.compile(fullgraph=True) traces through the registered custom ops: write the cache, prefill, decode."""

import torch

import pagedmla as pm
from pagedmla.testing import assert_close, make_paged_batch

LATENT, ROPE, NOPE, V, HEADS = 32, 16, 8, 8, 2


def mla_step(x, offsets, kv, w_a, gamma, freqs, q_nope, q_rope, w_kv_b, bro, co, buffer_length, latent_buf, k_buf):
    pm.k_matmul_ragged_paged(x, offsets, w_a, kv, 0)
    pm.rms_norm_key_cache(kv, gamma, 1e-6, 0, offsets, rms_norm_cols=LATENT)
    q_rope = pm.fused_qk_rope_ragged(q_rope, offsets, kv, freqs, 0)
    pm.mla_decompress_k_cache_ragged_paged(bro, co, buffer_length, w_kv_b, kv, 0, latent_buf, k_buf)
    kv_heads = k_buf.view(k_buf.shape[0], HEADS, NOPE + V)
    q = torch.cat([q_nope, q_rope], dim=-1)
    prefill = pm.mla_prefill_kv_cache_ragged(q, kv_heads[..., :NOPE], kv_heads[..., NOPE:], bro, co, offsets, kv, 0,
                                             0.3)
    q_dec = torch.cat([q_nope.repeat(1, 1, LATENT // NOPE), q_rope], dim=-1)
    decode = pm.mla_decode_kv_cache_ragged(q_dec, offsets, kv, 0, 0.3, qk_rope_head_dim=ROPE)
    return prefill, decode


def test_compile_fullgraph_write_prefill_decode():
    torch._dynamo.reset()
    pb = make_paged_batch([0, 0], [3, 5], head_size=LATENT + ROPE, page_size=4, num_layers=1, seed=0,
                          fill_new_tokens=False)
    gen = torch.Generator().manual_seed(1)
    T = pb.num_rows
    x = torch.randn(T, 24, generator=gen)
    w_a = torch.randn(LATENT + ROPE, 24, generator=gen) / 5
    gamma = torch.randn(LATENT, generator=gen)
    freqs = torch.randn(16, ROPE, generator=gen)
    q_nope, q_rope = torch.randn(T, HEADS, NOPE, generator=gen), torch.randn(T, HEADS, ROPE, generator=gen)
    w_kv_b = torch.randn(HEADS * (NOPE + V), LATENT, generator=gen) / 5
    bro, co, lengths = pm.mla_prefill_plan(pb.input_row_offsets, pb.kv, 16, 1)
    bro, co, buffer_length = bro[0], co[0], int(lengths[0])
    blocks0 = pb.kv.blocks.clone()

    def run(fn):
        pb.kv.blocks.copy_(blocks0)
        latent_buf = torch.full((16, LATENT), float("nan"))
        k_buf = torch.full((16, HEADS * (NOPE + V)), float("nan"))
        return fn(x, pb.input_row_offsets, pb.kv, w_a, gamma, freqs, q_nope, q_rope, w_kv_b, bro, co, buffer_length,
                  latent_buf, k_buf), pb.kv.blocks.clone()

    # The eager run comes first: it also loads the backends, as an engine's warm-up step would.
    (eager_prefill, eager_decode), eager_blocks = run(mla_step)
    (comp_prefill, comp_decode), comp_blocks = run(torch.compile(mla_step, fullgraph=True, backend="aot_eager"))
    assert_close(comp_prefill, eager_prefill, atol=1e-6)
    assert_close(comp_decode, eager_decode, atol=1e-6)
    assert_close(comp_blocks, eager_blocks, atol=0)
    assert torch.isfinite(eager_prefill).all() and torch.isfinite(eager_decode).all()


# ---- how the ops are registered (pagedmla.ops._common.LibraryOp) -----------------------------------------------


def _small_prefill():
    pb = make_paged_batch([2, 0], [3, 4], head_size=LATENT + ROPE, page_size=4, num_layers=1, seed=0)
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(pb.num_rows, HEADS, NOPE + ROPE, generator=gen)
    bro, co, _ = pm.mla_prefill_plan(pb.input_row_offsets, pb.kv, 16, 1)
    k = torch.randn(16, HEADS, NOPE + V, generator=gen)
    return pb, q, k, bro[0], co[0]


def test_ops_record_no_autograd_and_bump_versions():
    """As torch.library.custom_op did: inputs that require grad give outputs that do not (the ops have no
    derivatives, and the reference path records no graph), and every mutated tensor's version counter moves."""
    pb, q, k, bro, co = _small_prefill()
    q.requires_grad_()
    out, lse = pm.mla_prefill_kv_cache_ragged(q, k[..., :NOPE], k[..., NOPE:], bro, co, pb.input_row_offsets, pb.kv,
                                              0, 0.3, return_lse=True)
    assert not out.requires_grad and not lse.requires_grad
    before = pb.kv.blocks._version
    pm.k_matmul_ragged_paged(torch.randn(pb.num_rows, 8), pb.input_row_offsets, torch.randn(LATENT + ROPE, 8),
                             pb.kv, 0)
    assert pb.kv.blocks._version > before


def test_ops_are_pt2_compliant_and_survive_a_reimport():
    """The tag is on every op; reloading the op modules (in a child process: a reload leaves this one with two
    copies of the classes) defines the ops again, and they run."""
    import os
    import subprocess
    import sys

    for name in ("k_matmul_ragged_paged", "mla_prefill_plan", "mla_prefill_kv_cache_ragged",
                 "mla_decode_kv_cache_ragged"):
        assert torch.Tag.pt2_compliant_tag in getattr(torch.ops.pagedmla, name).default.tags, name
    script = (
        "import importlib, torch, pagedmla as pm\n"
        "from pagedmla.ops import cache_write, decode, prefill\n"
        "for module in (cache_write, prefill, decode):\n"
        "    importlib.reload(module)\n"
        "from pagedmla.testing import make_paged_batch\n"
        "pb = make_paged_batch([2, 0], [3, 4], head_size=48, page_size=4, num_layers=1, seed=0)\n"
        "w = torch.randn(48, 8)\n"
        "cache_write.k_matmul_ragged_paged(torch.randn(pb.num_rows, 8), pb.input_row_offsets, w, pb.kv, 0)\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
