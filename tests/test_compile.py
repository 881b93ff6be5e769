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
