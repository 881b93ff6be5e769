"""KVCacheParams, PagedKVCacheCollection views and the PagedKVCacheManager's page bookkeeping."""

import pytest
import torch

import pagedmla as pm


def mla_params(page_size=4, dtype=torch.float32):
    return pm.KVCacheParams(num_heads=1, head_size=80, is_mla=True, page_size=page_size, num_layers=2, dtype=dtype)


def test_views_are_strided_views_of_blocks():
    p = pm.KVCacheParams(num_heads=2, head_size=8, is_mla=False, page_size=4, num_layers=3)
    blocks = torch.randn(p.block_shape(5)).to(p.dtype)
    kv = pm.PagedKVCacheCollection(blocks, torch.zeros(1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32), p)
    k, v = kv.key_cache(2), kv.value_cache(2)
    assert k.shape == (5, 4, 2, 8) and v.shape == (5, 4, 2, 8)
    assert k.data_ptr() == blocks[:, 0, 2].data_ptr() and v.data_ptr() == blocks[:, 1, 2].data_ptr()
    k[1, 2, 1, 3] = 7.0
    assert blocks[1, 0, 2, 2, 1, 3] == 7.0


def test_fp8_params_and_scales_shape():
    p = pm.KVCacheParams(1, 576, True, 64, 2, torch.float8_e4m3fn, quantization_granularity=64)
    assert p.scales_shape(3) == (3, 1, 2, 64, 1, 9)
    # 576 = 4 * 128 + 64: a fifth, short group holds the rope values
    assert pm.KVCacheParams(1, 576, True, 64, 2, torch.float8_e4m3fn, quantization_granularity=128).scales_per_row == 5


def test_manager_step_commit_release_roundtrip():
    m = pm.PagedKVCacheManager(mla_params(), num_blocks=10)
    m.claim("a")
    m.claim("b")
    kv = m.step(["a", "b"], [5, 2])
    assert kv.lookup_table.shape == (2, 2)
    assert kv.cache_lengths.tolist() == [0, 0]
    assert (kv.max_seq_length, kv.max_cache_length) == (5, 5)
    m.commit(["a", "b"], [5, 2])
    assert m.length("a") == 5 and m.length("b") == 2 and m.num_free_blocks == 7
    kv = m.step(["b"], [3])
    assert kv.cache_lengths.tolist() == [2] and len(m.pages("b")) == 2
    m.commit(["b"], [3])
    pages_a = m.pages("a")
    m.release("a")
    assert m.num_free_blocks == 10 - 2
    m.claim("c")
    m.step(["c"], [8])
    assert sorted(m.pages("c")) == sorted(pages_a)


def test_prefix_sharing_maps_full_pages_only_and_refcounts():
    m = pm.PagedKVCacheManager(mla_params(page_size=4), num_blocks=8)
    m.claim("a")
    m.step(["a"], [10])
    m.commit(["a"], [10])
    shared = m.claim("b", share_prefix_from="a", num_shared_tokens=9)
    assert shared == 8
    assert m.pages("b") == m.pages("a")[:2]
    kv = m.step(["a", "b"], [1, 3])
    table = kv.lookup_table.tolist()
    assert table[0][:2] == table[1][:2]
    # b's new tokens (positions 8..10) land in a page a does not own
    assert m.pages("b")[2] not in m.pages("a")
    m.commit(["a", "b"], [1, 3])
    free_before = m.num_free_blocks
    m.release("a")
    # a's third page is freed, the two shared ones are still held by b
    assert m.num_free_blocks == free_before + 1
    m.release("b")
    assert m.num_free_blocks == 8


def test_pool_exhaustion_leaves_state_unchanged():
    m = pm.PagedKVCacheManager(mla_params(page_size=4), num_blocks=3)
    m.claim("a")
    m.claim("b")
    m.step(["a"], [4])
    m.commit(["a"], [4])
    before = (m.num_free_blocks, m.pages("a"), m.pages("b"), m.length("a"))
    with pytest.raises(pm.OutOfPagesError, match="needs 3 new pages"):
        m.step(["a", "b"], [4, 8])
    assert (m.num_free_blocks, m.pages("a"), m.pages("b"), m.length("a")) == before


def test_manager_collection_feeds_the_ops():
    m = pm.PagedKVCacheManager(mla_params(page_size=3), num_blocks=6)
    m.claim(0)
    kv = m.step([0], [7])
    x = torch.randn(7, 16)
    w = torch.randn(80, 16)
    pm.k_matmul_ragged_paged(x, pm.row_offsets([7]), w, kv, 1)
    pages = m.pages(0)
    rows = torch.stack([m.blocks[pages[p // 3], 0, 1, p % 3, 0] for p in range(7)])
    torch.testing.assert_close(rows, x @ w.T)


def test_quantize_kv_cache_roundtrip_error_is_fp8_sized():
    """The scales are each group's amax / 448 (computed here, not by the library), and every value comes back
    within e4m3's rounding (2^-4 relative) of its own group's largest value: a group size or scale that is off
    fails one or the other. Groups of very different sizes make a scale from the wrong group visible."""
    p = mla_params()
    blocks = torch.randn(p.block_shape(3))
    # per-column magnitudes from 1e-3 to 1e3, so that each 16-column group has its own range
    blocks = blocks * torch.logspace(-3, 3, p.head_size)
    kv = pm.PagedKVCacheCollection(blocks, torch.zeros(1, dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32), p)
    q8 = pm.quantize_kv_cache(kv, 16)
    groups = blocks.unflatten(-1, (p.head_size // 16, 16))
    amax = groups.abs().amax(-1)
    torch.testing.assert_close(q8.scales, amax / 448, rtol=1e-6, atol=0)
    back = (q8.blocks.float().unflatten(-1, groups.shape[-2:]) * q8.scales.unsqueeze(-1))
    rel = ((back - groups).abs() / amax.unsqueeze(-1)).max()
    assert 0 < rel <= 2.0**-4
    # rope-aware: one scale per row for the latent bytes (latent amax / 448), the rope values as bf16 bytes
    ra = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=16)
    assert ra.params.head_size == 96 and ra.scales.shape[-1] == 1
    latent, rope = blocks[..., :64], blocks[..., 64:]
    lat_amax = latent.abs().amax(-1, keepdim=True)
    torch.testing.assert_close(ra.scales, lat_amax / 448, rtol=1e-6, atol=0)
    back_lat = ra.blocks[..., :64].float() * ra.scales
    assert 0 < ((back_lat - latent).abs() / lat_amax).max() <= 2.0**-4
    back_rope = ra.blocks[..., 64:].contiguous().view(torch.bfloat16).float()
    torch.testing.assert_close(back_rope, rope.to(torch.bfloat16).float(), rtol=0, atol=0)


def test_fixed_width_lookup_table_for_graph_replay():
    m = pm.PagedKVCacheManager(mla_params(page_size=4), num_blocks=10, max_pages_per_request=3)
    m.claim("a")
    assert m.step(["a"], [1]).lookup_table.shape == (1, 3)
    m.commit(["a"], [1])
    assert m.step(["a"], [5]).lookup_table.shape == (1, 3)
    m.commit(["a"], [5])
    with pytest.raises(ValueError, match="max_pages_per_request=3"):
        m.step(["a"], [7])
    assert len(m.pages("a")) == 2


def test_rope_aware_cache_is_rejected_by_prefill():
    p = mla_params()
    kv = pm.PagedKVCacheCollection(torch.randn(p.block_shape(2)), torch.zeros(1, dtype=torch.int32),
                                   torch.zeros(1, 1, dtype=torch.int32), p)
    ra = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=16)
    assert ra.params.per_token_scale_rope_aware
    q, k = torch.randn(1, 2, 24), torch.randn(1, 2, 8)
    with pytest.raises(ValueError, match="rope-aware"):
        pm.mla_prefill_kv_cache_ragged(q, k, k, pm.row_offsets([1]), torch.zeros(1, dtype=torch.int32),
                                       pm.row_offsets([1]), ra, 0, 0.1)
