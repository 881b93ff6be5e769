"""The float32 reference against independent formulas and against itself (SPEC sections 2-5).

Naive oracles here work on unpaged, per-sequence tensors built from `PagedBatch.dense_rows`, so a bug in the
paged addressing of the reference cannot hide in the oracle too.
"""

import math

import pytest
import torch

import pagedmla as pm
from pagedmla.masks import MASK_CODES
from pagedmla.testing import assert_close, make_paged_batch

LATENT, ROPE = 64, 16
HEAD = LATENT + ROPE
REF = dict(backend="reference")


def naive_mask(mask, q_pos, k_pos, n, w):
    rule = {
        "null": True,
        "causal": k_pos <= q_pos,
        "sliding_window_causal": k_pos <= q_pos and q_pos - k_pos < w,
        "sliding_window_noncausal": q_pos - k_pos < w,
        "chunked": q_pos // w == k_pos // w,
        "chunked_causal": k_pos <= q_pos and q_pos // w == k_pos // w,
    }[mask]
    return rule and k_pos < n


def naive_softmax_attention(logits, values, allowed, sink=None):
    """logits [K], values [K, D], allowed [K] bool -> (out [D], lse) with plain Python-level masking."""
    idx = [j for j in range(len(allowed)) if allowed[j]]
    if not idx:
        return torch.zeros(values.shape[-1], dtype=torch.float64), float("-inf")
    sel = logits[idx].double()
    lse = torch.logsumexp(sel, 0)
    denom = torch.exp(lse) + (math.exp(sink) if sink is not None else 0.0)
    out = (torch.exp(sel).unsqueeze(-1) * values[idx].double()).sum(0) / denom
    return out, float(lse)


def naive_decode(pb, q, scale, mask="causal", window=-1, sink=None, layer=0):
    offs = pb.input_row_offsets.tolist()
    out = torch.zeros(q.shape[0], q.shape[1], LATENT, dtype=torch.float64)
    lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float64)
    for b in range(len(offs) - 1):
        keys = pb.dense_rows(b, layer)[:, 0].double()
        n = pb.totals[b]
        for s in range(pb.new_lengths[b]):
            g, q_pos = offs[b] + s, pb.cache_lengths[b] + s
            allowed = [naive_mask(mask, q_pos, j, n, window) for j in range(n)]
            for h in range(q.shape[1]):
                logits = scale * keys @ q[g, h].double()
                o, l_ = naive_softmax_attention(logits, keys[:, :LATENT], allowed,
                                                None if sink is None else float(sink[h]))
                out[g, h], lse[g, h] = o, l_
    return out, lse


BATCHES = [
    pytest.param([0], [1], 4, id="B1-empty-cache-one-token"),
    pytest.param([5, 0, 17], [2, 3, 1], 4, id="B3-mtp-ps4"),
    pytest.param([3, 15, 16, 17], [1, 1, 1, 1], 16, id="B4-page-edges-ps16"),
    pytest.param([7, 2], [0, 4], 1, id="B2-one-empty-ps1"),
    pytest.param([30, 9], [5, 8], 3, id="B2-odd-ps3"),
]


# every mask of pagedmla.masks, with a window where it takes one (test_every_mask_code_is_exercised)
DECODE_MASKS = [("null", -1), ("causal", -1), ("sliding_window_causal", 3), ("sliding_window_noncausal", 5),
                ("chunked", 4), ("chunked_causal", 4)]


@pytest.mark.parametrize("cache_lengths,new_lengths,page_size", BATCHES)
@pytest.mark.parametrize("mask,window", DECODE_MASKS)
def test_decode_matches_naive_attention(cache_lengths, new_lengths, page_size, mask, window):
    pb = make_paged_batch(cache_lengths, new_lengths, head_size=HEAD, page_size=page_size, seed=1)
    q = torch.randn(pb.num_rows, 3, HEAD)
    out, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, mask=mask,
                                             local_window_size=window, return_lse=True, qk_rope_head_dim=ROPE, **REF)
    want, want_lse = naive_decode(pb, q, 0.3, mask, window)
    assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert_close(lse, want_lse, atol=1e-5, rtol=1e-5, name="lse")


@pytest.mark.parametrize("parts", [2, 3, 7, 40])
def test_split_decode_equals_unsplit(parts, monkeypatch):
    """The reference really splits each sequence's keys into `parts` pieces (its attention step runs once per
    piece; 40 leaves some pieces empty) and merges them to the unsplit answer."""
    from pagedmla.reference import decode as ref_decode

    pieces = []

    def counted(*args, **kwargs):
        pieces.append(args[0].shape[-1])
        return attend(*args, **kwargs)

    attend = ref_decode.attend
    monkeypatch.setattr(ref_decode, "attend", counted)
    pb = make_paged_batch([21, 3, 40], [2, 1, 3], head_size=HEAD, page_size=4, seed=2)
    q = torch.randn(pb.num_rows, 4, HEAD)
    one, lse1 = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 1, 0.2, return_lse=True,
                                              qk_rope_head_dim=ROPE, num_partitions=1, **REF)
    assert len(pieces) == 3
    pieces.clear()
    split, lse2 = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 1, 0.2, return_lse=True,
                                                qk_rope_head_dim=ROPE, num_partitions=parts, **REF)
    assert len(pieces) == 3 * parts and sum(pieces) == sum(pb.totals)
    assert_close(split, one, atol=2e-6, rtol=1e-5)
    assert_close(lse2, lse1, atol=2e-6, rtol=1e-6, name="lse")


@pytest.mark.parametrize("sink_kind", ["finite", "plus_inf", "minus_inf"])
def test_attention_sink(sink_kind):
    pb = make_paged_batch([6, 1], [2, 1], head_size=HEAD, page_size=4, seed=3)
    q = torch.randn(pb.num_rows, 3, HEAD)
    sink = {"finite": torch.tensor([0.5, -1.0, 3.0]), "plus_inf": torch.full((3,), float("inf")),
            "minus_inf": torch.full((3,), float("-inf"))}[sink_kind]
    out, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.4, attn_sink=sink,
                                             return_lse=True, qk_rope_head_dim=ROPE, **REF)
    want, want_lse = naive_decode(pb, q, 0.4, sink=None if sink_kind == "minus_inf" else sink)
    if sink_kind == "plus_inf":
        want = torch.zeros_like(want)
    assert_close(out, want, atol=1e-5, rtol=1e-5)
    # the sink never enters the returned LSE
    assert_close(lse, want_lse, atol=1e-5, rtol=1e-5, name="lse")


def test_absorbed_decode_equals_unabsorbed_attention():
    """q_nope @ W_UK against the latent cache, then W_UV, equals attention over keys/values from kv_b_proj."""
    heads, nope, v_dim = 3, 8, 12
    pb = make_paged_batch([9, 4], [1, 2], head_size=HEAD, page_size=4, seed=4)
    w_kv_b = torch.randn(heads * (nope + v_dim), LATENT) / 8
    w = w_kv_b.view(heads, nope + v_dim, LATENT)
    w_uk, w_uv = w[:, :nope], w[:, nope:]
    q_nope, q_rope = torch.randn(pb.num_rows, heads, nope), torch.randn(pb.num_rows, heads, ROPE)
    q_abs = torch.cat([torch.einsum("thn,hnl->thl", q_nope, w_uk), q_rope], dim=-1)
    scale = 1 / math.sqrt(nope + ROPE)
    latent_out = pm.mla_decode_kv_cache_ragged(q_abs, pb.input_row_offsets, pb.kv, 0, scale,
                                               qk_rope_head_dim=ROPE, **REF)
    got = torch.einsum("thl,hvl->thv", latent_out, w_uv)
    offs = pb.input_row_offsets.tolist()
    for b in range(2):
        rows = pb.dense_rows(b)[:, 0]
        k_nope = torch.einsum("nl,hdl->nhd", rows[:, :LATENT], w_uk)
        v = torch.einsum("nl,hvl->nhv", rows[:, :LATENT], w_uv)
        for s in range(pb.new_lengths[b]):
            g, q_pos = offs[b] + s, pb.cache_lengths[b] + s
            for h in range(heads):
                logits = scale * (k_nope[: q_pos + 1, h] @ q_nope[g, h] + rows[: q_pos + 1, LATENT:] @ q_rope[g, h])
                want = torch.softmax(logits, 0) @ v[: q_pos + 1, h]
                assert_close(got[g, h], want, atol=1e-5, rtol=1e-4)


def _prefill_inputs(pb, heads, nope, v_dim, seed=5):
    gen = torch.Generator().manual_seed(seed)
    w_kv_b = torch.randn(heads * (nope + v_dim), LATENT, generator=gen) / 8
    q = torch.randn(pb.num_rows, heads, nope + ROPE, generator=gen)
    return w_kv_b, q


def naive_prefill(pb, q, w_kv_b, scale, nope, mask="causal", window=-1, layer=0, with_lse=False):
    heads = q.shape[1]
    w = w_kv_b.view(heads, -1, LATENT).double()
    offs = pb.input_row_offsets.tolist()
    out = torch.zeros(q.shape[0], heads, w.shape[1] - nope, dtype=torch.float64)
    lse = torch.full((q.shape[0], heads), float("-inf"), dtype=torch.float64)
    for b in range(len(offs) - 1):
        rows = pb.dense_rows(b, layer)[:, 0].double()
        kv = torch.einsum("nl,hdl->nhd", rows[:, :LATENT], w)
        n = pb.totals[b]
        for s in range(pb.new_lengths[b]):
            g, q_pos = offs[b] + s, pb.cache_lengths[b] + s
            allowed = [naive_mask(mask, q_pos, j, n, window) for j in range(n)]
            for h in range(heads):
                keys = torch.cat([kv[:, h, :nope], rows[:, LATENT:]], dim=-1)
                out[g, h], lse[g, h] = naive_softmax_attention(scale * keys @ q[g, h].double(), kv[:, h, nope:],
                                                               allowed)
    return (out, lse) if with_lse else out


@pytest.mark.parametrize("buffer_size", [pytest.param(4096, id="one-chunk"), pytest.param(8, id="chunks-of-8"),
                                         pytest.param(5, id="chunks-of-5")])
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 4), ("chunked", 3),
                                         ("null", -1)])
def test_chunked_prefill_matches_naive(buffer_size, mask, window):
    nope, v_dim, heads = 8, 12, 2
    pb = make_paged_batch([3, 0, 6], [5, 7, 0], head_size=HEAD, page_size=4, seed=6)
    w_kv_b, q = _prefill_inputs(pb, heads, nope, v_dim)
    out, lse = pm.mla_prefill(q, pb.input_row_offsets, pb.kv, 1, w_kv_b, 0.3, buffer_size=buffer_size, mask=mask,
                              local_window_size=window, return_lse=True, **REF)
    want, want_lse = naive_prefill(pb, q, w_kv_b, 0.3, nope, mask, window, layer=1, with_lse=True)
    assert_close(out, want, atol=2e-5, rtol=1e-4)
    assert_close(lse, want_lse, atol=2e-5, rtol=1e-5, name="lse")


def test_prefill_plan_worked_example_from_spec():
    p = pm.KVCacheParams(1, 8, True, 128, 1, torch.float32)
    kv = pm.PagedKVCacheCollection(torch.zeros(p.block_shape(4)), torch.zeros(2, dtype=torch.int32),
                                   torch.tensor([[0, 1], [2, 3]], dtype=torch.int32), p)
    bro, co, lengths = pm.mla_prefill_plan(pm.row_offsets([160, 200]), kv, 256, 4, **REF)
    assert bro[0].tolist() == [0, 256, 256] and bro[1].tolist() == [0, 0, 256]
    assert co[1].tolist() == [256, 0]
    assert lengths.tolist() == [256, 256, -1, -1]


def test_write_then_decompress_returns_written_rows():
    pb = make_paged_batch([5, 0, 9], [3, 6, 2], head_size=HEAD, page_size=4, seed=7, fill_new_tokens=False)
    x = torch.randn(pb.num_rows, 24)
    w_a = torch.randn(HEAD, 24)
    pm.k_matmul_ragged_paged(x, pb.input_row_offsets, w_a, pb.kv, 1, **REF)
    w_b = torch.randn(40, LATENT)
    bro, co, lengths = pm.mla_prefill_plan(pb.input_row_offsets, pb.kv, 64, 2, **REF)
    latent = torch.full((64, LATENT), float("nan"))
    k_buf = torch.full((64, 40), float("nan"))
    pm.mla_decompress_k_cache_ragged_paged(bro[0], co[0], lengths[0], w_b, pb.kv, 1, latent, k_buf, **REF)
    offs, r = pb.input_row_offsets.tolist(), 0
    written = x @ w_a.T
    for b in range(3):
        rows = bro[0, b + 1] - bro[0, b]
        old = pb.cache_lengths[b]
        # cached rows come back as they were, new rows as the projection wrote them
        assert_close(latent[r: r + old], pb.dense_rows(b, 1)[:old, 0, :LATENT], atol=0)
        assert_close(latent[r + old: r + old + pb.new_lengths[b]], written[offs[b]: offs[b + 1], :LATENT],
                     atol=1e-5)
        r += int(rows)
    assert r == int(lengths[0])
    valid = torch.isfinite(latent).all(-1)
    assert_close(k_buf[valid], latent[valid] @ w_b.T, atol=1e-4, rtol=1e-5)
    assert torch.isnan(k_buf[int(lengths[0]):]).all()


def test_decode_of_one_token_equals_prefill_of_it():
    nope, v_dim, heads = 8, 12, 2
    pb = make_paged_batch([6, 11], [1, 1], head_size=HEAD, page_size=4, seed=8)
    w_kv_b, q = _prefill_inputs(pb, heads, nope, v_dim)
    prefill = pm.mla_prefill(q, pb.input_row_offsets, pb.kv, 0, w_kv_b, 0.3, **REF)
    w = w_kv_b.view(heads, nope + v_dim, LATENT)
    q_abs = torch.cat([torch.einsum("thn,hnl->thl", q[..., :nope], w[:, :nope]), q[..., nope:]], dim=-1)
    latent = pm.mla_decode_kv_cache_ragged(q_abs, pb.input_row_offsets, pb.kv, 0, 0.3, qk_rope_head_dim=ROPE, **REF)
    assert_close(torch.einsum("thl,hvl->thv", latent, w[:, nope:]), prefill, atol=1e-5, rtol=1e-4)


def test_k_and_kv_matmul_store_rows_and_touch_nothing_else():
    pb = make_paged_batch([2, 5], [3, 1], head_size=HEAD, page_size=4, seed=9, fill_new_tokens=False)
    before = pb.kv.blocks.clone()
    x, w = torch.randn(4, 16), torch.randn(HEAD, 16)
    pm.k_matmul_ragged_paged(x, pb.input_row_offsets, w, pb.kv, 0, **REF)
    changed = ~((pb.kv.blocks == before) | (torch.isnan(pb.kv.blocks) & torch.isnan(before)))
    assert int(changed.any(-1).sum()) == 4  # exactly the four new rows
    assert_close(pb.dense_rows(0)[2:5, 0], x[:3] @ w.T, atol=1e-5)
    assert_close(pb.dense_rows(1)[5:6, 0], x[3:] @ w.T, atol=1e-5)
    mha = make_paged_batch([1], [2], head_size=6, num_heads=2, is_mla=False, page_size=2, seed=10)
    x2, w2 = torch.randn(2, 5), torch.randn(2 * 2 * 6, 5)
    pm.kv_matmul_ragged_paged(x2, mha.input_row_offsets, w2, mha.kv, 1, **REF)
    c = (x2 @ w2.T).view(2, 2, 2, 6)
    assert_close(mha.dense_rows(0, 1, kv=0)[1:], c[:, 0], atol=1e-5)
    assert_close(mha.dense_rows(0, 1, kv=1)[1:], c[:, 1], atol=1e-5)


@pytest.mark.parametrize("eps", [1e-6, 0.5])
def test_rms_norm_key_cache_formula(eps):
    """x / sqrt(mean(x^2) + eps) * gamma on the new rows' latent columns; eps = 0.5 is about mean(x^2) of these
    rows, so a formula that drops or misplaces eps fails."""
    pb = make_paged_batch([3], [2], head_size=HEAD, page_size=2, seed=11)
    rows_before = pb.dense_rows(0)[:, 0].clone()
    gamma = torch.randn(LATENT)
    pm.rms_norm_key_cache(pb.kv, gamma, eps, 0, pb.input_row_offsets, rms_norm_cols=LATENT, **REF)
    rows = pb.dense_rows(0)[:, 0]
    x = rows_before[3:, :LATENT]
    want = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma
    assert_close(rows[3:, :LATENT], want, atol=1e-5, rtol=1e-5)
    assert torch.equal(rows[3:, LATENT:], rows_before[3:, LATENT:])
    assert torch.equal(rows[:3], rows_before[:3])


@pytest.mark.parametrize("interleaved", [True, False])
def test_rope_is_a_complex_rotation(interleaved):
    pb = make_paged_batch([2, 0], [2, 3], head_size=HEAD, page_size=4, seed=12)
    before = [pb.dense_rows(b)[:, 0].clone() for b in range(2)]
    angles = torch.rand(16, ROPE // 2) * 6
    freqs = torch.stack([angles.cos(), angles.sin()], dim=-1).flatten(-2)
    q = torch.randn(5, 2, ROPE)
    q_out = pm.fused_qk_rope_ragged(q, pb.input_row_offsets, pb.kv, freqs, 0, interleaved, **REF)

    def rotate(x, pos):
        z = torch.complex(x[..., 0::2], x[..., 1::2]) if interleaved else torch.complex(*x.chunk(2, dim=-1))
        z = z * torch.polar(torch.ones(ROPE // 2), angles[pos])
        pairs = torch.stack([z.real, z.imag], -1).flatten(-2) if interleaved else torch.cat([z.real, z.imag], -1)
        return pairs

    offs = pb.input_row_offsets.tolist()
    for b in range(2):
        rows = pb.dense_rows(b)[:, 0]
        for s in range(pb.new_lengths[b]):
            pos, g = pb.cache_lengths[b] + s, offs[b] + s
            assert_close(q_out[g], rotate(q[g], pos), atol=1e-5)
            assert_close(rows[pos, LATENT:], rotate(before[b][pos, LATENT:], pos), atol=1e-5)
            assert torch.equal(rows[pos, :LATENT], before[b][pos, :LATENT])
        assert torch.equal(rows[: pb.cache_lengths[b]], before[b][: pb.cache_lengths[b]])


def _physical(pb, b, positions):
    table = pb.kv.lookup_table[b].tolist()
    return [table[p // pb.kv.page_size] * pb.kv.page_size + p % pb.kv.page_size for p in positions]


def test_sparse_decode_over_all_positions_equals_dense_null_mask():
    pb = make_paged_batch([9, 4], [2, 1], head_size=HEAD, page_size=4, seed=13)
    q = torch.randn(pb.num_rows, 2, HEAD)
    gen = torch.Generator().manual_seed(0)
    topk = 20
    idx = torch.full((pb.num_rows, topk), -1, dtype=torch.int32)
    offs = pb.input_row_offsets.tolist()
    for b in range(2):
        phys = _physical(pb, b, range(pb.totals[b]))
        for g in range(offs[b], offs[b + 1]):
            cols = torch.randperm(topk - 2, generator=gen)[: len(phys)]
            idx[g, cols] = torch.tensor(phys, dtype=torch.int32)  # shuffled, with -1 holes among them
    # columns past topk_lengths point at a NaN-poisoned spare slot: they must be ignored
    idx[:, topk - 2:] = pb.kv.num_blocks * pb.kv.page_size - 1
    lengths = torch.tensor([topk - 2, topk - 2], dtype=torch.int32)
    got, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, mask="null", indices=idx,
                                             topk_lengths=lengths, return_lse=True, qk_rope_head_dim=ROPE, **REF)
    want, want_lse = naive_decode(pb, q, 0.3, mask="null")
    assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert_close(lse, want_lse, atol=1e-5, rtol=1e-5, name="lse")


def test_extra_stream_joins_the_same_softmax():
    pb = make_paged_batch([12], [2], head_size=HEAD, page_size=4, seed=14)
    extra = make_paged_batch([6], [0], head_size=HEAD, page_size=2, seed=15)
    q = torch.randn(2, 2, HEAD)
    main_pos, extra_pos = [0, 3, 7, 13, 11], [5, 1, 2]
    idx = torch.tensor(_physical(pb, 0, main_pos), dtype=torch.int32).expand(2, -1).contiguous()
    extra_idx = torch.tensor(_physical(extra, 0, extra_pos) + [-1], dtype=torch.int32).expand(2, -1).contiguous()
    got, lse = pm.mla_decode_kv_cache_ragged(
        q, pb.input_row_offsets, pb.kv, 1, 0.3, mask="null", indices=idx,
        topk_lengths=torch.tensor([5], dtype=torch.int32), extra_k=extra.kv, extra_indices=extra_idx,
        extra_topk_lengths=torch.tensor([4], dtype=torch.int32), return_lse=True, qk_rope_head_dim=ROPE, **REF)
    keys = torch.cat([pb.dense_rows(0, 1)[main_pos, 0], extra.dense_rows(0, 1)[extra_pos, 0]]).double()
    for g in range(2):
        for h in range(2):
            o, l_ = naive_softmax_attention(0.3 * keys @ q[g, h].double(), keys[:, :LATENT], [True] * len(keys))
            assert_close(got[g, h], o, atol=1e-5, rtol=1e-5)
            assert abs(float(lse[g, h]) - l_) < 1e-5


def test_sparse_row_with_no_valid_index_gives_zero_and_minus_inf():
    pb = make_paged_batch([4], [2], head_size=HEAD, page_size=4, seed=16)
    q = torch.randn(2, 2, HEAD)
    idx = torch.tensor([[-1, -1, -1], [0, -1, 1]], dtype=torch.int32)
    idx[1] = torch.tensor(_physical(pb, 0, [0, 1, 2]))
    idx[1, 1] = -1
    out, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, mask="null", indices=idx,
                                             topk_lengths=torch.tensor([3], dtype=torch.int32), return_lse=True,
                                             qk_rope_head_dim=ROPE, **REF)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.isneginf(lse[0]).all() and torch.isfinite(lse[1]).all()


def _dequantized_by_hand(rows, scales, granularity=None, rope=None):
    """FP8 cache rows as float32, written out here rather than taken from the reference: element d times
    scale[d // G] (the last group may be short); or, for the rope-aware row, the latent bytes times the row's
    one scale and the last 2 * rope bytes viewed as bf16 values."""
    if rope is not None:
        cut = rows.shape[-1] - 2 * rope
        return torch.cat([rows[..., :cut].float() * scales,
                          rows[..., cut:].contiguous().view(torch.bfloat16).float()], dim=-1)
    return rows.float() * scales.repeat_interleave(granularity, dim=-1)[..., :rows.shape[-1]]


@pytest.mark.parametrize("granularity", [16, 64, 80, 48, 36])
def test_fp8_cache_decode_equals_decode_of_dequantized_cache(granularity):
    """The reference decodes an FP8 cache as the float32 cache its rows dequantize to (dequantized here, by
    hand), and that cache is within e4m3's rounding of the original (the scales themselves are checked in
    test_cache.py)."""
    pb = make_paged_batch([7, 2], [1, 2], head_size=HEAD, page_size=4, seed=17, poison=False)
    q8 = pm.quantize_kv_cache(pb.kv, granularity)
    deq = pb.kv.replace(blocks=_dequantized_by_hand(q8.blocks, q8.scales, granularity))
    q = torch.randn(pb.num_rows, 2, HEAD)
    got = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, q8, 0, 0.3, qk_rope_head_dim=ROPE, **REF)
    want = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, deq, 0, 0.3, qk_rope_head_dim=ROPE, **REF)
    assert_close(got, want, atol=1e-6, rtol=1e-5)
    rel = (deq.blocks - pb.kv.blocks).abs() / pb.kv.blocks.abs().amax(-1, keepdim=True).clamp_min(1e-6)
    assert float(rel.max()) < 0.07


def test_rope_aware_fp8_row_with_fp8_q():
    """The rope-aware FP8 cache and FP8 q decode as their rows dequantized by hand (latent bytes times the row's
    scale, the rope bytes as bf16): exactly, in bf16 output."""
    from pagedmla.reference import quantize_rows

    pb = make_paged_batch([7, 2], [1, 2], head_size=HEAD, page_size=4, seed=18, poison=False)
    ra = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=ROPE)
    deq = pb.kv.replace(blocks=_dequantized_by_hand(ra.blocks, ra.scales, rope=ROPE))
    qf = torch.randn(pb.num_rows, 2, HEAD)
    q_rows, q_scales = quantize_rows(qf, HEAD, rope_aware=True, qk_rope_head_dim=ROPE)
    # one scale per q row g: use the max over heads so q_scale is [T]
    q_scale = q_scales.amax(dim=1).view(-1)
    q_rows = torch.cat([(qf[..., :LATENT] / q_scale.view(-1, 1, 1)).to(torch.float8_e4m3fn),
                        qf[..., LATENT:].to(torch.bfloat16).contiguous().view(torch.float8_e4m3fn)], dim=-1)
    got = pm.mla_decode_kv_cache_ragged(q_rows, pb.input_row_offsets, ra, 0, 0.3, q_scale=q_scale,
                                        per_token_scale_rope_aware=True, qk_rope_head_dim=ROPE, **REF)
    q_deq = _dequantized_by_hand(q_rows, q_scale.view(-1, 1, 1), rope=ROPE)
    want = pm.mla_decode_kv_cache_ragged(q_deq, pb.input_row_offsets, deq, 0, 0.3, qk_rope_head_dim=ROPE, **REF)
    assert got.dtype == torch.bfloat16
    assert_close(got, want.to(torch.bfloat16), atol=0)


def test_fp8_q_scale_multiplies_the_logits():
    pb = make_paged_batch([5], [2], head_size=HEAD, page_size=4, seed=19)
    qf = torch.randn(2, 2, HEAD)
    q8 = (qf * 16).to(torch.float8_e4m3fn)
    q_scale = torch.tensor([1 / 16, 1 / 16])
    got = pm.mla_decode_kv_cache_ragged(q8, pb.input_row_offsets, pb.kv, 0, 0.3, q_scale=q_scale,
                                        qk_rope_head_dim=ROPE, **REF)
    want = pm.mla_decode_kv_cache_ragged(q8.float() / 16, pb.input_row_offsets, pb.kv, 0, 0.3,
                                         qk_rope_head_dim=ROPE, **REF)
    assert_close(got, want.to(torch.bfloat16), atol=0)


def test_every_mask_code_is_exercised():
    """The contract's six masks are the library's, and the naive-attention decode test runs each of them (a mask
    added to the library fails here until that test covers it)."""
    assert set(MASK_CODES) == {"null", "causal", "sliding_window_causal", "sliding_window_noncausal", "chunked",
                               "chunked_causal"}
    assert {mask for mask, _ in DECODE_MASKS} == set(MASK_CODES)
