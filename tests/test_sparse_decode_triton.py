"""The Triton sparse (top-k) MLA decode against the float32 reference (SPEC section 5, "Sparse").

CPU tier: the interpreter at latent 64 + rope 16, on poisoned caches (NaN in every unused slot and spare block),
shuffled tables, index rows with -1 holes, columns past `topk_lengths` pointing at NaN rows, out-of-pool and
garbage ids, outputs pre-filled with NaN. GPU tier: DeepSeek-V3.2 shapes (512 + 64, topk 2048, 2 query tokens).
float32 compute is held to a fixed tolerance; 16-bit compute to twice PyTorch's own bf16 error.
"""

from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch

import pagedmla as pm
from pagedmla.kernels.common import GDC_AVAILABLE
from pagedmla.reference.attention import apply_sink
from pagedmla.reference.decode import _query_rows, _sparse_keys
from pagedmla.reference.decode import mla_decode_kv_cache_ragged as reference_decode
from pagedmla.reference.paged import dequantize_rows
from pagedmla.testing import assert_close, assert_close_to_reference, make_paged_batch

FP8 = torch.float8_e4m3fn
I32 = torch.int32


def _physical(pb, b, positions):
    table = pb.kv.lookup_table[b].tolist()
    ps = pb.kv.page_size
    return [table[p // ps] * ps + p % ps for p in positions]


def _nan_rows(pb):
    """Physical rows that hold NaN: every slot of the spare blocks (no table names them)."""
    ps = pb.kv.page_size
    used = {int(x) for x in pb.kv.lookup_table.flatten().tolist() if 0 <= int(x) < pb.kv.num_blocks}
    return [blk * ps + s for blk in range(pb.kv.num_blocks) if blk not in used for s in range(ps)]


def _index_rows(pb, topk, lengths, gen, *, shared=False, offsets=None):
    """int32 `[T, topk]`: per row, distinct positions of its sequence (as physical rows) scattered over the first
    `lengths[b]` columns with -1 holes; the columns past the length name NaN rows, out-of-pool ids and garbage.
    `offsets` (default: pb's) are the query rows of each sequence (another batch's, for an extra stream)."""
    offs = pb.input_row_offsets.tolist() if offsets is None else offsets
    pool = pb.kv.num_blocks * pb.kv.page_size
    nan_rows = _nan_rows(pb)
    junk = [nan_rows[0], 2**30, -7, pool, pool + 123, nan_rows[-1]]
    idx = torch.tensor([junk[c % len(junk)] for c in range(topk)], dtype=I32).repeat(offs[-1], 1)
    for b in range(len(offs) - 1):
        phys = _physical(pb, b, range(pb.totals[b]))
        n = lengths[b]
        row = None
        for g in range(offs[b], offs[b + 1]):
            if row is None or not shared:
                row = torch.full((n,), -1, dtype=I32)
                # leave at least one hole when there is room, so -1 is always exercised
                k = min(len(phys), max(0, n - 1) if n > 1 else n)
                pick = torch.randperm(len(phys), generator=gen)[:k]
                cols = torch.randperm(n, generator=gen)[:k]
                row[cols] = torch.tensor(phys, dtype=I32)[pick]
            idx[g, :n] = row
    return idx


def _lowprec(q, q_scale, kv, layer, idx, lengths, extra, scale, sink, rank, rope_aware, rope):
    """The reference on the kernel's bf16-rounded operands: keys and P rounded to bf16, float32 products and
    sums, FP8 q's scale applied to the logits, the output rounded to bf16 (the low-precision error)."""
    if q.dtype == FP8:
        q_raw = _query_rows(q, torch.ones_like(q_scale), rope_aware, rope)
        lat_scale = q_scale.view(-1, 1, 1)
        rope_scale = torch.ones_like(lat_scale) if rope_aware else lat_scale
    else:
        q_raw = q.float()
        lat_scale = rope_scale = torch.ones(q.shape[0], 1, 1)
    offs = extra["offsets"]
    out = torch.zeros(q.shape[0], q.shape[1], rank)
    lse = torch.full(q.shape[:2], float("-inf"))
    for b in range(len(offs) - 1):
        g0, g1 = offs[b], offs[b + 1]
        if g1 == g0:
            continue
        keys, vis = _sparse_keys(kv.blocks, kv.scales, kv.params.quantization_granularity, layer, idx[g0:g1],
                                 int(lengths[b]), rope_aware, rope)
        if extra.get("kv") is not None:
            ek, ev = _sparse_keys(extra["kv"].blocks, extra["kv"].scales, extra["kv"].params.quantization_granularity,
                                  layer, extra["idx"][g0:g1],
                                  int(extra["lengths"][b]), rope_aware, rope)
            keys, vis = torch.cat([keys, ek], 1), torch.cat([vis, ev], 1)
        kb = keys.bfloat16().float()
        qb = q_raw[g0:g1].bfloat16().float()
        logits = scale * (torch.einsum("shd,snd->shn", qb[..., :rank], kb[..., :rank]) * lat_scale[g0:g1]
                          + torch.einsum("shd,snd->shn", qb[..., rank:], kb[..., rank:]) * rope_scale[g0:g1])
        logits = logits.masked_fill(~vis.unsqueeze(1), float("-inf"))
        s = torch.logsumexp(logits, -1)
        p = torch.exp(logits - torch.where(torch.isfinite(s), s, 0.0).unsqueeze(-1)).bfloat16().float()
        o = torch.einsum("shn,snd->shd", p, kb[..., :rank])
        if sink is not None:
            o = apply_sink(o, s, sink)
        out[g0:g1], lse[g0:g1] = o.bfloat16().float(), s
    return out, lse


def _reference32(q, offsets, kv, layer, scale, kw):
    """The reference with a float32 output (the public function would round it to q's dtype)."""
    rank = kv.params.head_size - (2 if kw["per_token_scale_rope_aware"] else 1) * kw["qk_rope_head_dim"]
    out = torch.empty(q.shape[0], q.shape[1], rank)
    lse = torch.empty(q.shape[:2])
    x = kw.get("extra_k")
    reference_decode(q, offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales, layer, scale, 0, -1, 1,
                     out, lse, q_scale=kw["q_scale"], rope_aware=kw["per_token_scale_rope_aware"],
                     qk_rope_head_dim=kw["qk_rope_head_dim"], indices=kw["indices"], topk_lengths=kw["topk_lengths"],
                     attn_sink=kw.get("attn_sink"), extra_blocks=None if x is None else x.blocks,
                     extra_scales=None if x is None else x.scales, extra_indices=kw.get("extra_indices"),
                     extra_topk_lengths=kw.get("extra_topk_lengths"),
                     quant_granularity=kv.params.quantization_granularity or 0,
                     extra_quant_granularity=0 if x is None else x.params.quantization_granularity or 0)
    return out, lse


LATENT, ROPE = 64, 16
HEAD = LATENT + ROPE


def _quantize_q(qf, rope_aware, gen):
    """FP8 q and its per-row q_scale (the rope-aware q keeps its rope part as bf16 bytes)."""
    lat = qf[..., :LATENT] if rope_aware else qf
    q_scale = lat.abs().amax(dim=(1, 2)) / 448 * (1 + torch.rand(qf.shape[0], generator=gen))
    q8 = (lat / q_scale.view(-1, 1, 1)).to(FP8)
    if rope_aware:
        q8 = torch.cat([q8, qf[..., LATENT:].to(torch.bfloat16).contiguous().view(FP8)], dim=-1)
    return q8, q_scale


def _run(case: dict, seed: int):
    gen = torch.Generator().manual_seed(seed)
    cache, new, heads, ps, topk = case["cache"], case["new"], case["heads"], case["ps"], case["topk"]
    pb = make_paged_batch(cache, new, head_size=HEAD, page_size=ps, seed=seed, num_layers=2)
    lengths = case.get("lengths") or [min(topk, n) for n in pb.totals]
    idx = _index_rows(pb, topk, lengths, gen, shared=case.get("fold", False))
    kv = pb.kv
    fp8, rope_aware = case.get("fp8"), case.get("fp8") == "rope"
    if fp8 == "rope":
        kv = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=ROPE)
    elif fp8 is not None:
        kv = pm.quantize_kv_cache(kv, fp8)
    qf = torch.randn(pb.num_rows, heads, HEAD, generator=gen)
    q_scale = None
    if case.get("q") == "fp8":
        q, q_scale = _quantize_q(qf, rope_aware, gen)
    else:
        q = qf.to(case.get("q", torch.float32))
    kw = {"mask": "null", "indices": idx, "topk_lengths": torch.tensor(lengths, dtype=I32), "q_scale": q_scale,
              "per_token_scale_rope_aware": rope_aware, "qk_rope_head_dim": ROPE, "return_lse": True,
              "fold_shared_index": case.get("fold", False)}
    extra = {"offsets": pb.input_row_offsets.tolist()}
    if case.get("extra"):
        xps, xg = case["extra"]
        xb = make_paged_batch([c + n + 3 for c, n in zip(cache, new)], [0] * len(cache), head_size=HEAD,
                              page_size=xps, seed=seed + 1, num_layers=2)
        x_topk = 12
        x_len = [min(x_topk, t) for t in xb.totals]
        x_idx = _index_rows(xb, x_topk, x_len, gen, shared=case.get("fold", False), offsets=extra["offsets"])
        xkv = xb.kv
        if fp8 == "rope":
            xkv = pm.quantize_kv_cache(xkv, rope_aware=True, qk_rope_head_dim=ROPE)
        elif fp8 is not None:
            xkv = pm.quantize_kv_cache(xkv, xg)
        x_lengths = torch.tensor(x_len, dtype=I32)
        kw.update(extra_k=xkv, extra_indices=x_idx, extra_topk_lengths=x_lengths)
        extra.update(kv=xkv, idx=x_idx, lengths=x_lengths)
    sink = None
    if case.get("sink"):
        sink = torch.randn(heads, generator=gen)
        sink[0] = float("inf") if heads > 2 else sink[0]
        kw["attn_sink"] = sink
    out_dtype = torch.bfloat16 if q.dtype == FP8 else q.dtype
    got = torch.full((pb.num_rows, heads, LATENT), float("nan"), dtype=out_dtype)
    got, got_lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, kv, 1, 0.3, output=got,
                                                 num_partitions=case.get("splits"), backend="triton", **kw)
    want, want_lse = _reference32(q, pb.input_row_offsets, kv, 1, 0.3, kw)
    return {"got": got, "got_lse": got_lse, "want": want, "want_lse": want_lse, "q": q, "q_scale": q_scale, "kv": kv, "idx": idx,
                "lengths": lengths, "extra": extra, "sink": sink, "rope_aware": rope_aware}


def _bf16_eps(want, caches, rope_aware, rope):
    """The two bf16 roundings the kernel does at other points than the low-precision reference: P before
    P @ V (at most 2^-9 max|V|, since P's row sums to 1) and the output itself (2^-9 max|out|)."""
    v_max = 0.0
    for kv in caches:
        rows = dequantize_rows(kv.blocks, kv.scales, granularity=kv.params.quantization_granularity,
                               rope_aware=rope_aware, qk_rope_head_dim=rope)
        v_max = max(v_max, float(rows[..., : want.shape[-1]].nan_to_num(0.0, 0.0, 0.0).abs().max()))
    return 2.0**-9 * (v_max + float(want.abs().max()))


def _envelope(low, ref, dims):
    """ref moved by PyTorch's largest bf16 error over `dims` (a row): two implementations round at different
    points, so their errors do not line up element by element."""
    err = (low - ref).abs().nan_to_num(0.0)
    return ref + err.amax(dim=dims, keepdim=True)


def _check(r, fp32: bool):
    if fp32:
        assert_close(r["got"], r["want"], atol=2e-5, rtol=1e-5)
        assert_close(r["got_lse"], r["want_lse"], atol=2e-5, rtol=1e-5, name="lse")
        return
    low, low_lse = _lowprec(r["q"], r["q_scale"], r["kv"], 1, r["idx"], r["lengths"], r["extra"], 0.3, r["sink"],
                            LATENT, r["rope_aware"], ROPE)
    caches = [r["kv"]] + ([r["extra"]["kv"]] if r["extra"].get("kv") is not None else [])
    eps = _bf16_eps(r["want"], caches, r["rope_aware"], ROPE)
    assert_close_to_reference(r["got"].float(), r["want"], _envelope(low, r["want"], -1), eps=eps)
    assert_close_to_reference(r["got_lse"], r["want_lse"], _envelope(low_lse, r["want_lse"], -1), eps=1e-4,
                              name="lse")


def case(id, **kw):
    return pytest.param(kw, id=id)


CPU_CASES = [
    case("B3-H2-ps1-topk8-mtp", cache=[5, 0, 11], new=[2, 1, 3], heads=2, ps=1, topk=8),
    case("B3-H4-ps4-topk24", cache=[9, 4, 30], new=[1, 2, 1], heads=4, ps=4, topk=24),
    case("B2-H3-ps16-topk40-len0", cache=[37, 3], new=[3, 2], heads=3, ps=16, topk=40, lengths=[40, 0]),
    case("B2-H2-ps4-topk24-split3", cache=[25, 12], new=[2, 1], heads=2, ps=4, topk=24, splits=3),
    case("B2-H3-ps4-sink-split2", cache=[13, 20], new=[1, 2], heads=3, ps=4, topk=20, sink=True, splits=2),
    case("B2-H2-ps4-extra-ps2-sink", cache=[10, 17], new=[2, 1], heads=2, ps=4, topk=16, extra=(2, None),
         sink=True),
    case("B3-H2-ps4-fold-mtp", cache=[15, 6, 22], new=[3, 1, 2], heads=2, ps=4, topk=20, fold=True),
    case("B2-H4-ps16-fold-extra-split2", cache=[20, 9], new=[2, 3], heads=4, ps=16, topk=24, fold=True,
         extra=(4, None), splits=2),
    case("B2-H2-ps4-fp8-G16", cache=[14, 9], new=[2, 1], heads=2, ps=4, topk=16, fp8=16),
    case("B2-H2-ps4-fp8-G64-sink", cache=[14, 9], new=[1, 2], heads=2, ps=4, topk=16, fp8=64, sink=True),
    case("B2-H2-ps1-fp8-G48", cache=[7, 9], new=[2, 1], heads=2, ps=1, topk=12, fp8=48),
    case("B2-H2-ps4-fp8-G8-extra-G80", cache=[11, 6], new=[1, 2], heads=2, ps=4, topk=12, fp8=8, extra=(2, 80)),
    case("B2-H3-ps4-rope-aware", cache=[14, 9], new=[2, 1], heads=3, ps=4, topk=16, fp8="rope"),
    case("B2-H2-ps4-bf16", cache=[14, 19], new=[2, 1], heads=2, ps=4, topk=24, q=torch.bfloat16),
    case("B2-H2-ps4-fp8q-bf16out", cache=[14, 9], new=[2, 1], heads=2, ps=4, topk=16, q="fp8"),
    case("B2-H2-ps4-fp8q-fp8-G16", cache=[12, 9], new=[1, 2], heads=2, ps=4, topk=16, q="fp8", fp8=16),
    case("B2-H2-ps4-fp8q-rope-aware-fold-extra", cache=[12, 9], new=[2, 2], heads=2, ps=4, topk=16, q="fp8",
         fp8="rope", fold=True, extra=(4, None)),
    case("B2-H2-ps4-bf16q-rope-aware-split2", cache=[12, 9], new=[2, 1], heads=2, ps=4, topk=16,
         q=torch.bfloat16, fp8="rope", splits=2),
]


@pytest.mark.parametrize("spec", CPU_CASES)
def test_sparse_decode_matches_reference(spec):
    r = _run(spec, seed=zlib.crc32(repr(sorted(spec.items())).encode()) % 1000)
    _check(r, fp32=r["q"].dtype == torch.float32)


def test_rows_without_valid_index_give_zero_and_minus_inf():
    pb = make_paged_batch([6, 5, 4], [2, 1, 1], head_size=HEAD, page_size=4, seed=3)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(pb.num_rows, 2, HEAD, generator=gen)
    idx = _index_rows(pb, 8, [8, 0, 8], gen)
    idx[0, :] = -1  # every counted entry of token 0 is -1
    idx[3, :] = -1
    out = torch.full((pb.num_rows, 2, LATENT), float("nan"))
    out, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, mask="null", indices=idx,
                                             topk_lengths=torch.tensor([8, 0, 8], dtype=I32),
                                             attn_sink=torch.tensor([0.5, float("inf")]), output=out,
                                             return_lse=True, qk_rope_head_dim=ROPE, backend="triton")
    for g in (0, 2, 3):
        assert torch.equal(out[g], torch.zeros_like(out[g])), g
        assert torch.isneginf(lse[g]).all(), g
    assert torch.isfinite(lse[1]).all() and torch.equal(out[1, 1], torch.zeros_like(out[1, 1]))
    assert out[1, 0].abs().sum() > 0


def test_out_of_pool_ids_inside_the_length_are_skipped():
    """The public function rejects them; the launcher must still never dereference them."""
    from pagedmla.ops._triton_sparse_decode import sparse_decode
    from pagedmla.reference.decode import mla_decode_kv_cache_ragged as reference

    pb = make_paged_batch([10, 7], [1, 2], head_size=HEAD, page_size=4, seed=5)
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(pb.num_rows, 2, HEAD, generator=gen)
    idx = _index_rows(pb, 12, [12, 12], gen)
    pool = pb.kv.num_blocks * pb.kv.page_size
    idx[:, 0], idx[:, 5], idx[1, 7] = 2**30, pool, -5
    lengths = torch.tensor([12, 12], dtype=I32)
    outs = []
    for fn in (sparse_decode, reference):
        out = torch.full((pb.num_rows, 2, LATENT), float("nan"))
        lse = torch.full((pb.num_rows, 2), float("nan"))
        fn(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths, pb.kv.lookup_table, None, 0, 0.3, 0, -1, 1,
           out, lse, qk_rope_head_dim=ROPE, indices=idx, topk_lengths=lengths)
        outs.append((out, lse))
    assert_close(outs[0][0], outs[1][0], atol=2e-5, rtol=1e-5)
    assert_close(outs[0][1], outs[1][1], atol=2e-5, rtol=1e-5, name="lse")


def test_fold_shared_index_equals_per_token_rows():
    spec = {"cache": [18, 7], "new": [3, 2], "heads": 2, "ps": 4, "topk": 16, "fold": True, "sink": True}
    r = _run(spec, seed=11)
    kw = {"mask": "null", "indices": r["idx"], "topk_lengths": torch.tensor(r["lengths"], dtype=I32),
              "attn_sink": r["sink"], "qk_rope_head_dim": ROPE, "return_lse": True, "backend": "triton"}
    pb_offsets = torch.tensor(r["extra"]["offsets"], dtype=I32)
    kv = r["kv"]
    plain, plain_lse = pm.mla_decode_kv_cache_ragged(r["q"], pb_offsets, kv, 1, 0.3, **kw)
    assert_close(r["got"], plain, atol=1e-5, rtol=1e-5)
    assert_close(r["got_lse"], plain_lse, atol=1e-5, rtol=1e-6, name="lse")


# ---- gpu tier: DeepSeek-V3.2 shapes ----

V32_RANK, V32_ROPE = 512, 64


def _v32_case(heads, kv_kind, q_kind, *, fold=False, extra=False, sink=False, seed=0, poison_followers=False):
    """DeepSeek-V3.2's sparse call (2 query tokens per sequence, topk 2048) against the float32 reference.
    `poison_followers` (with `fold`): the kernel gets -1 in every index row but each sequence's first (the
    reference the shared rows), so a kernel that read a follower token's row would give 0, not the answer."""
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(seed)
    cache, new = [3000, 5200], [2, 2]
    topk = 2048
    pb = make_paged_batch(cache, new, head_size=V32_RANK + V32_ROPE, page_size=64, seed=seed, num_layers=1,
                          spare_blocks=2, dtype=torch.bfloat16 if kv_kind == "bf16" else torch.float32)
    lengths = [2048, 1900]
    idx = _index_rows(pb, topk, lengths, gen, shared=fold)
    kv = pb.kv
    rope_aware = kv_kind == "rope"
    if kv_kind == "rope":
        kv = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=V32_ROPE)
    elif kv_kind == "fp8-G64":
        kv = pm.quantize_kv_cache(kv, 64)
    qf = torch.randn(pb.num_rows, heads, V32_RANK + V32_ROPE, generator=gen) * 0.5
    q_scale = None
    if q_kind == "fp8":
        lat = qf[..., :V32_RANK] if rope_aware else qf
        q_scale = lat.abs().amax(dim=(1, 2)) / 448
        q = (lat / q_scale.view(-1, 1, 1)).to(FP8)
        if rope_aware:
            q = torch.cat([q, qf[..., V32_RANK:].bfloat16().contiguous().view(FP8)], dim=-1)
    else:
        q = qf.bfloat16()
    kw = {"mask": "null", "indices": idx, "topk_lengths": torch.tensor(lengths, dtype=I32), "q_scale": q_scale,
              "per_token_scale_rope_aware": rope_aware, "qk_rope_head_dim": V32_ROPE, "return_lse": True,
              "fold_shared_index": fold}
    ex = {"offsets": pb.input_row_offsets.tolist()}
    if extra:
        xb = make_paged_batch([300, 200], [0, 0], head_size=V32_RANK + V32_ROPE, page_size=16, seed=seed + 1,
                              num_layers=1, dtype=torch.bfloat16 if kv_kind == "bf16" else torch.float32)
        x_idx = _index_rows(xb, 128, [128, 100], gen, shared=fold, offsets=ex["offsets"])
        xkv = xb.kv
        if kv_kind == "rope":
            xkv = pm.quantize_kv_cache(xkv, rope_aware=True, qk_rope_head_dim=V32_ROPE)
        elif kv_kind == "fp8-G64":
            xkv = pm.quantize_kv_cache(xkv, 64)
        x_len = torch.tensor([128, 100], dtype=I32)
        kw.update(extra_k=xkv, extra_indices=x_idx, extra_topk_lengths=x_len)
        ex.update(kv=xkv, idx=x_idx, lengths=x_len)
    sink_t = torch.randn(heads, generator=gen) if sink else None
    kw["attn_sink"] = sink_t
    want, want_lse = _reference32(q, pb.input_row_offsets, kv, 0, 0.1, kw)
    low, low_lse = _lowprec(q, q_scale, kv, 0, idx, lengths, ex, 0.1, sink_t, V32_RANK, rope_aware, V32_ROPE)

    def to_dev(x):
        if isinstance(x, torch.Tensor):
            return x.to(dev)
        if isinstance(x, pm.PagedKVCacheCollection):
            return x.replace(blocks=x.blocks.to(dev), scales=None if x.scales is None else x.scales.to(dev),
                             cache_lengths=x.cache_lengths.to(dev), lookup_table=x.lookup_table.to(dev))
        return x

    kw_dev = {k: to_dev(v) for k, v in kw.items()}
    if poison_followers:
        followers = torch.ones(pb.num_rows, dtype=torch.bool)
        followers[pb.input_row_offsets[:-1].long()] = False
        kw_dev["indices"][followers.to(dev)] = -1
    out_dtype = torch.bfloat16
    got = torch.full((pb.num_rows, heads, V32_RANK), float("nan"), dtype=out_dtype, device=dev)
    got, got_lse = pm.mla_decode_kv_cache_ragged(to_dev(q), pb.input_row_offsets.to(dev), to_dev(kv), 0, 0.1,
                                                 output=got, backend="triton", **kw_dev)
    caches = [kv] + ([ex["kv"]] if extra else [])
    eps = _bf16_eps(want, caches, rope_aware, V32_ROPE)
    assert_close_to_reference(got.float().cpu(), want, _envelope(low, want, -1), eps=eps)
    assert_close_to_reference(got_lse.cpu(), want_lse, _envelope(low_lse, want_lse, -1), eps=1e-4, name="lse")


GPU_CASES = [
    pytest.param(128, "bf16", "bf16", {}, id="H128-bf16"),
    pytest.param(128, "rope", "bf16", {}, id="H128-rope-aware-bf16q"),
    pytest.param(128, "rope", "fp8", {"sink": True}, id="H128-rope-aware-fp8q-sink"),
    pytest.param(128, "fp8-G64", "bf16", {"extra": True}, id="H128-fp8-G64-extra"),
    pytest.param(16, "bf16", "bf16", {}, id="H16-bf16"),
    pytest.param(16, "bf16", "bf16", {"fold": True, "sink": True}, id="H16-bf16-fold-sink"),
    pytest.param(16, "rope", "bf16", {"fold": True, "extra": True}, id="H16-rope-aware-fold-extra"),
    pytest.param(16, "fp8-G64", "fp8", {}, id="H16-fp8-G64-fp8q"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("heads, kv_kind, q_kind, opts", GPU_CASES)
def test_sparse_decode_v32_shapes_gpu(heads, kv_kind, q_kind, opts):
    _v32_case(heads, kv_kind, q_kind, **opts)


@pytest.mark.parametrize("prefetch", [False, True], ids=["no-prefetch", "prefetch"])
@pytest.mark.parametrize("block_m", [16, 64], ids=["bm16", "bm64"])
def test_forced_configs_and_splits(block_m, prefetch):
    """Explicit launch configs (tile rows, a split of every index row across 1-3 programs) give the reference's
    answer with a main stream in mode 2 (G=16) and an extra stream in mode 3 (G=64 on 80 columns)."""
    from pagedmla.configs.sparse_decode import SparseDecodeConfig
    from pagedmla.ops._triton_sparse_decode import sparse_decode

    spec = {"cache": [21, 9], "new": [2, 1], "heads": 3, "ps": 4, "topk": 24, "fp8": 16, "extra": (2, 64), "sink": True}
    r = _run(spec, seed=23)
    kv, x = r["kv"], r["extra"]
    offsets = torch.tensor(x["offsets"], dtype=I32)
    for splits in (1, 2, 3):
        cfg = SparseDecodeConfig(block_m=block_m, block_n=16, num_splits=splits, num_warps=1, num_stages=1,
                                 prefetch_indices=prefetch, combine_block_r=4, combine_block_dv=32,
                                 combine_num_warps=1)
        out = torch.full((offsets[-1], 3, LATENT), float("nan"))
        lse = torch.full((offsets[-1], 3), float("nan"))
        sparse_decode(r["q"], offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales, 1, 0.3, 0, -1, splits,
                      out, lse, qk_rope_head_dim=ROPE, indices=r["idx"],
                      topk_lengths=torch.tensor(r["lengths"], dtype=I32), attn_sink=r["sink"],
                      extra_blocks=x["kv"].blocks, extra_scales=x["kv"].scales, extra_indices=x["idx"],
                      extra_topk_lengths=x["lengths"], quant_granularity=kv.params.quantization_granularity,
                      extra_quant_granularity=x["kv"].params.quantization_granularity, config=cfg)
        assert_close(out, r["want"], atol=2e-5, rtol=1e-5, name=f"output splits={splits}")
        assert_close(lse, r["want_lse"], atol=2e-5, rtol=1e-5, name=f"lse splits={splits}")


@pytest.mark.parametrize("cache_dtype,rope_aware,stages", [(FP8, True, 2), (FP8, False, 3),
                                                          (torch.bfloat16, False, 3)],
                         ids=["rope-aware-fp8", "grouped-fp8", "bf16"])
def test_heuristic_64_row_stages(cache_dtype, rope_aware, stages):
    """64-row tiles (128 heads) take 2 pipeline stages on the rope-aware FP8 row and 3 otherwise (the faster of
    the two on an H200 for each layout); 16-row tiles keep 3."""
    from pagedmla.configs.sparse_decode import heuristic

    kw = dict(num_groups=128, topk=2048, q_dtype=torch.bfloat16, cache_dtype=cache_dtype,
              compute_dtype=torch.bfloat16, num_sms=132, rope_aware=rope_aware)
    assert heuristic(rows_per_group=128, **kw).num_stages == stages
    assert heuristic(rows_per_group=16, **kw).num_stages == 3


def test_combine_tile_bounds_registers():
    """The 4 x 512 combine tile (timed at 2 splits) only while all splits' partials stay within 8K elements;
    more splits take 8 x 128 tiles, which do not spill."""
    from pagedmla.configs.sparse_decode import SparseDecodeConfig, combine_tile
    cfg = SparseDecodeConfig()
    assert combine_tile(cfg, 2, 512) == (4, 512)
    assert combine_tile(cfg, 4, 512) == (4, 512)
    assert combine_tile(cfg, 16, 512) == (8, 128)
    assert combine_tile(cfg, 2, 64) == (4, 64)


# ---- the Gluon ring kernel (16 rows or fewer, bf16/fp16 cache; Hopper) ----

def _ring_case(heads, dtype, *, cache, new, lengths, page_size=64, sink=False, config=None, seed=0, q_mult=0.5,
               parts=None, topk=None):
    """A sparse decode of `heads` heads on a `dtype` cache ("fp8": the rope-aware FP8 row with a bf16 q; NaN in
    every unused slot and spare block, index rows with -1 holes, columns past `lengths` naming NaN rows and
    out-of-pool ids; `topk` index columns, by default 5 past the longest length), run through the public op
    (`parts`: its num_partitions, the programs per index row; or the launcher with `config`) on the GPU and
    checked against the float32 reference."""
    from pagedmla.ops._triton_sparse_decode import sparse_decode

    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(seed)
    topk = topk or max(lengths) + 5
    rope_aware = dtype == "fp8"
    q_dtype = torch.bfloat16 if rope_aware else dtype
    pb = make_paged_batch(cache, new, head_size=V32_RANK + V32_ROPE, page_size=page_size, seed=seed, num_layers=2,
                          spare_blocks=2, dtype=torch.float32 if rope_aware else dtype)
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=V32_ROPE) if rope_aware else pb.kv
    idx = _index_rows(pb, topk, lengths, gen)
    q = (torch.randn(pb.num_rows, heads, V32_RANK + V32_ROPE, generator=gen) * q_mult).to(q_dtype)
    sink_t = torch.randn(heads, generator=gen) if sink else None
    host_kv = kv
    kv = kv.replace(blocks=kv.blocks.to(dev), scales=None if kv.scales is None else kv.scales.to(dev),
                    cache_lengths=kv.cache_lengths.to(dev), lookup_table=kv.lookup_table.to(dev))
    got = torch.full((pb.num_rows, heads, V32_RANK), float("nan"), dtype=q_dtype, device=dev)
    got_lse = torch.full((pb.num_rows, heads), float("nan"), device=dev)
    sink_dev = None if sink_t is None else sink_t.to(dev)
    if config is None:
        got, got_lse = pm.mla_decode_kv_cache_ragged(
            q.to(dev), pb.input_row_offsets.to(dev), kv, 1, 0.1, mask="null", output=got, indices=idx.to(dev),
            topk_lengths=torch.tensor(lengths, dtype=I32, device=dev), attn_sink=sink_dev, qk_rope_head_dim=V32_ROPE,
            per_token_scale_rope_aware=rope_aware, num_partitions=parts, return_lse=True, backend="triton")
    else:
        sparse_decode(q.to(dev), pb.input_row_offsets.to(dev), kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales,
                      1, 0.1, 0, -1, config.num_splits, got, got_lse, qk_rope_head_dim=V32_ROPE, rope_aware=rope_aware,
                      indices=idx.to(dev), topk_lengths=torch.tensor(lengths, dtype=I32, device=dev), attn_sink=sink_dev,
                      config=config)
    _check_layer1(q, pb.input_row_offsets, host_kv, idx, lengths, sink_t, rope_aware, got, got_lse)
    return got, got_lse


def _check_layer1(q, offsets, kv, idx, lengths, sink, rope_aware, got, got_lse):
    """`got` / `got_lse` (any device) of a sparse decode of layer 1 (scale 0.1, V3.2 dims) against the float32
    reference on the host tensors q, offsets, kv, idx (a bf16 q with the rope-aware FP8 row when `rope_aware`)."""
    kw = {"mask": "null", "indices": idx, "topk_lengths": torch.tensor(lengths, dtype=I32), "q_scale": None,
          "per_token_scale_rope_aware": rope_aware, "qk_rope_head_dim": V32_ROPE, "attn_sink": sink}
    want, want_lse = _reference32(q, offsets, kv, 1, 0.1, kw)
    low, low_lse = _lowprec(q, None, kv, 1, idx, lengths, {"offsets": offsets.tolist()}, 0.1, sink, V32_RANK,
                            rope_aware, V32_ROPE)
    eps = _bf16_eps(want, [kv], rope_aware, V32_ROPE)
    assert_close_to_reference(got.float().cpu(), want, _envelope(low, want, -1), eps=eps)
    assert_close_to_reference(got_lse.cpu(), want_lse, _envelope(low_lse, want_lse, -1), eps=1e-4, name="lse")


RING_CASES = [
    # heads, dtype, page size, cached / new tokens, top-k lengths (0: a sequence with no key; 20: one block, fewer
    # than the ring's slots), sink, programs per index row (None: the heuristic's, which splits these small
    # batches; 1: whole rows, the path of batches that fill the GPU)
    pytest.param(16, torch.bfloat16, 64, [3000, 5200, 90], [2, 1, 1], [2048, 1900, 20], False, None,
                 id="H16-bf16-ps64"),
    pytest.param(16, torch.bfloat16, 16, [700, 1500, 33], [1, 2, 1], [600, 1000, 0], True, None,
                 id="H16-bf16-ps16-sink"),
    pytest.param(7, torch.float16, 1, [300, 260], [2, 1], [250, 200], True, None, id="H7-fp16-ps1-sink"),
    pytest.param(16, torch.float16, 64, [900, 40, 500], [1, 1, 2], [700, 0, 20], True, 1,
                 id="H16-fp16-whole-rows-sink-len0"),
    pytest.param(1, torch.bfloat16, 64, [5000], [1], [4000], False, None, id="H1-bf16-one-token"),
    pytest.param(16, "fp8", 64, [3000, 5200, 90], [2, 1, 1], [2048, 1900, 20], True, None,
                 id="H16-rope-fp8-ps64-sink"),
    pytest.param(5, "fp8", 16, [700, 300], [1, 2], [600, 0], False, 1, id="H5-rope-fp8-ps16-whole-rows-len0"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("heads, dtype, page_size, cache, new, lengths, sink, parts", RING_CASES)
def test_gpu_sparse_ring_matches_reference(heads, dtype, page_size, cache, new, lengths, sink, parts, call_counter):
    """The public op runs the Gluon ring kernel for up to 16 heads of a bf16/fp16 cache or the rope-aware FP8
    one (its launches are counted, so a dispatch regression that falls back to the Triton kernel fails here)."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ring")
    _ring_case(heads, dtype, cache=cache, new=new, lengths=lengths, page_size=page_size, sink=sink, seed=heads,
               parts=parts)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, "fp8"], ids=["bf16", "rope-fp8"])
@pytest.mark.parametrize("slots", [2, 3, 5])
@pytest.mark.parametrize("splits", [1, 3, 40], ids=["split1", "split3", "split40"])
def test_gpu_sparse_ring_configs(dtype, slots, splits, call_counter):
    """Every ring depth, with one program per index row, three, and more programs than a short row has blocks
    (empty splits), with a sink."""
    from pagedmla.configs.sparse_decode import ring_config
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ring")
    cfg = dataclasses.replace(ring_config(num_groups=1, topk=2048, num_sms=132, slots=slots), num_splits=splits)
    _ring_case(16, dtype, cache=[2500, 800, 64], new=[1, 2, 1], lengths=[2000, 300, 64], sink=True, config=cfg,
               seed=slots + splits)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("q_mult", [3e5, 2e-6, 0.0], ids=["huge-q", "tiny-q", "zero-q"])
def test_gpu_sparse_ring_fp8_q_range(q_mult, call_counter):
    """The FP8 row on the ring kernel with q of extreme magnitudes (values up to about 1e6, logits far past
    exp2's range unless shifted by the running max; and about 1e-5) and an all-zero q (uniform weights)."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ring")
    _ring_case(16, "fp8", cache=[900, 400], new=[1, 2], lengths=[700, 300], seed=3, q_mult=q_mult)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("parts", [None, 1], ids=["split", "whole-rows"])
@pytest.mark.parametrize("kernel", ["ring", "ws"])
def test_gpu_sparse_gluon_all_minus_one_rows(kernel, parts, call_counter):
    """Index rows whose counted entries are all -1 (and one of length 0) give 0 and LSE -inf on the Gluon kernels
    (the ring kernel at 16 heads of a bf16 cache, the warp-specialized one at 64 heads of the rope-aware FP8
    row), with a sink (a +inf one on head 1), split across programs and whole; their neighbours are unaffected."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ring" if kernel == "ring" else "_launch_ws")
    heads, fp8 = (16, False) if kernel == "ring" else (64, True)
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(4)
    pb = make_paged_batch([400, 300, 200], [1, 1, 1], head_size=576, page_size=64, seed=4, spare_blocks=1,
                          dtype=torch.float32 if fp8 else torch.bfloat16)
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64) if fp8 else pb.kv
    lengths = [256, 0, 256]
    idx = _index_rows(pb, 256, lengths, gen)
    idx[0] = -1
    q = torch.randn(pb.num_rows, heads, 576, generator=gen).bfloat16()
    kv = kv.replace(blocks=kv.blocks.to(dev), scales=kv.scales.to(dev) if fp8 else None,
                    cache_lengths=kv.cache_lengths.to(dev), lookup_table=kv.lookup_table.to(dev))
    sink = torch.randn(heads, generator=gen)
    sink[1] = float("inf")
    out, lse = pm.mla_decode_kv_cache_ragged(q.to(dev), pb.input_row_offsets.to(dev), kv, 0, 0.1, mask="null",
                                             indices=idx.to(dev), topk_lengths=torch.tensor(lengths, dtype=I32,
                                                                                            device=dev),
                                             attn_sink=sink.to(dev), num_partitions=parts, qk_rope_head_dim=64,
                                             per_token_scale_rope_aware=fp8, return_lse=True, backend="triton")
    assert launches[0] == 1
    for g in (0, 1):
        assert torch.equal(out[g].cpu(), torch.zeros_like(out[g].cpu())), g
        assert torch.isneginf(lse[g].cpu()).all(), g
    assert torch.isfinite(out[2].cpu().float()).all() and torch.isfinite(lse[2].cpu()).all()
    assert out[2].abs().sum() > 0
    assert torch.equal(out[2, 1].cpu(), torch.zeros_like(out[2, 1].cpu()))  # the +inf sink takes all the weight


def test_sparse_ring_dispatch_rules(monkeypatch):
    """Which calls the ring kernel takes (Hopper patched in; CPU tensors): 16-bit q and cache of one dtype
    without scales, or a bf16 q with the rope-aware FP8 row and its scales; 512 + 64 dims, at most 16 heads, no
    fold, no extra stream, 16-byte aligned cache rows."""
    from pagedmla.ops import _triton_sparse_decode as sd

    monkeypatch.setattr(sd, "_RING_AVAILABLE", True)
    monkeypatch.setattr(sd, "is_hopper", lambda device: True)
    blocks = torch.empty(4, 1, 2, 64, 1, 576, dtype=torch.bfloat16)
    q = torch.empty(3, 16, 576, dtype=torch.bfloat16)
    out = torch.empty(3, 16, 512, dtype=torch.bfloat16)
    base = dict(rope_aware=False, fold=False, has_extra=False)
    assert sd.sparse_ring_ready(q, blocks, out, None, None, **base)
    assert sd.sparse_ring_ready(q.half(), blocks.half(), out.half(), None, None, **base)
    assert not sd.sparse_ring_ready(torch.empty(3, 17, 576, dtype=torch.bfloat16), blocks, out, None, None, **base)
    assert not sd.sparse_ring_ready(q.half(), blocks, out, None, None, **base)
    assert not sd.sparse_ring_ready(q, blocks, out, torch.empty(1), None, **base)
    assert not sd.sparse_ring_ready(q, blocks, out, None, None, rope_aware=False, fold=True, has_extra=False)
    assert not sd.sparse_ring_ready(q, blocks, out, None, None, rope_aware=False, fold=False, has_extra=True)
    assert not sd.sparse_ring_ready(q, blocks[..., :320], out[..., :256], None, None, **base)
    padded = torch.empty(4, 1, 2, 64, 1, 580, dtype=torch.bfloat16)[..., :576]  # rows 1160 bytes apart
    assert not sd.sparse_ring_ready(q, padded, out, None, None, **base)
    # 16-byte aligned rows whose stride is not a multiple of 16 elements: the compiler cannot prove the copies'
    # alignment (it compiles 2-byte copies, which cp.async does not have)
    padded = torch.empty(4, 1, 2, 64, 1, 584, dtype=torch.bfloat16)[..., :576]
    assert not sd.sparse_ring_ready(q, padded, out, None, None, **base)
    fp8 = torch.empty(4, 1, 2, 64, 1, 640, dtype=torch.float8_e4m3fn)
    scales = torch.empty(4, 1, 2, 64, 1, 1)
    rope = dict(base, rope_aware=True)
    assert sd.sparse_ring_ready(q, fp8, out, scales, None, **rope)
    assert not sd.sparse_ring_ready(q.half(), fp8, out.half(), scales, None, **rope)
    assert not sd.sparse_ring_ready(q, fp8, out, None, None, **rope)
    assert not sd.sparse_ring_ready(q, fp8, out, scales.double(), None, **rope)
    assert not sd.sparse_ring_ready(q, fp8, out, scales, None, **base)
    assert not sd.sparse_ring_ready(q, fp8[..., :576], out, scales, None, **rope)
    # FP8 rows 656 bytes apart: the rope part's bf16 view has a stride of 328 elements, not a multiple of 16
    assert not sd.sparse_ring_ready(q, torch.empty(4, 1, 2, 64, 1, 656, dtype=torch.float8_e4m3fn)[..., :640], out,
                                    scales, None, **rope)
    monkeypatch.setattr(sd, "is_hopper", lambda device: False)
    assert not sd.sparse_ring_ready(q, blocks, out, None, None, **base)


def test_sparse_ring_rejects_one_slot(monkeypatch):
    """A config with a ring of one slot (or more than 8) is a ValueError, not a wrong answer: the copy schedule
    needs a slot to compute in while the next block lands."""
    from pagedmla.configs.sparse_decode import ring_config
    from pagedmla.ops import _triton_sparse_decode as sd

    monkeypatch.setattr(sd, "sparse_ring_ready", lambda *a, **k: True)
    monkeypatch.setattr(sd, "interpreter_enabled", lambda: False)
    pb = make_paged_batch([40], [1], head_size=576, page_size=16, seed=1, dtype=torch.bfloat16)
    idx = torch.zeros(1, 32, dtype=I32)
    for slots in (1, 9):
        with pytest.raises(ValueError, match="ring_slots"):
            sd.sparse_decode(torch.zeros(1, 16, 576, dtype=torch.bfloat16), pb.input_row_offsets, pb.kv.blocks,
                             pb.kv.cache_lengths, pb.kv.lookup_table, None, 0, 0.1, 0, -1, 1,
                             torch.empty(1, 16, 512, dtype=torch.bfloat16), torch.empty(1, 16), indices=idx,
                             topk_lengths=torch.ones(1, dtype=I32), config=ring_config(num_groups=1, topk=32,
                                                                                       num_sms=132, slots=slots))


def test_sparse_ring_takes_folded_calls_of_two_tokens(monkeypatch):
    """fold_shared_index is a speed hint: with at most RING_UNFOLD_MAX_Q query tokens per sequence a call the ring
    kernel can take unfolded runs it unfolded; with more, the folded Triton tile runs (launchers recorded, not
    run: CPU tensors)."""
    from pagedmla.configs.sparse_decode import RING_UNFOLD_MAX_Q
    from pagedmla.ops import _triton_sparse_decode as sd

    launched = []
    monkeypatch.setattr(sd, "sparse_ring_ready", lambda *a, fold, **k: not fold)
    monkeypatch.setattr(sd, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(sd, "_launch_ring", lambda *a, **k: launched.append("ring"))

    class _Grid:
        def __getitem__(self, grid):
            return lambda *a, **k: launched.append(("triton", k["FOLD"]))
    monkeypatch.setattr(sd, "_mla_sparse_decode_kernel", _Grid())
    assert RING_UNFOLD_MAX_Q == 2
    for q_len, want in ((2, "ring"), (3, ("triton", True))):
        pb = make_paged_batch([40, 30], [q_len, q_len], head_size=576, page_size=16, seed=1, dtype=torch.bfloat16)
        rows = pb.num_rows
        sd.sparse_decode(torch.zeros(rows, 16, 576, dtype=torch.bfloat16), pb.input_row_offsets, pb.kv.blocks,
                         pb.kv.cache_lengths, pb.kv.lookup_table, None, 0, 0.1, 0, -1, 1,
                         torch.empty(rows, 16, 512, dtype=torch.bfloat16), torch.empty(rows, 16),
                         max_seq_length=q_len, fold_shared_index=True, indices=torch.zeros(rows, 32, dtype=I32),
                         topk_lengths=torch.full((2,), 32, dtype=I32))
        assert launched[-1] == want, launched


@pytest.mark.gpu
@pytest.mark.parametrize("kv_kind", ["bf16", "rope"])
def test_gpu_sparse_ring_takes_folded_calls(kv_kind, call_counter):
    """A fold_shared_index call with two query tokens per sequence runs the ring kernel (each token's own index
    row), against the reference."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ring")
    _v32_case(16, kv_kind, "bf16", fold=True, sink=True, seed=5)
    assert launches[0] == 1


def test_sparse_ring_heuristic():
    """`ring=True` picks the ring kernel for groups of up to 16 rows only, two programs per SM at its default 2
    slots (one from 3 on): index rows are split only when the groups alone leave program slots idle, and never
    below 4 blocks per split."""
    from pagedmla.configs.sparse_decode import RING_SLOTS, heuristic, ring_config

    kw = dict(topk=2048, q_dtype=torch.bfloat16, cache_dtype=torch.bfloat16, compute_dtype=torch.bfloat16,
              num_sms=132, ring=True)
    cfg = heuristic(rows_per_group=16, num_groups=128, **kw)
    assert (cfg.ring_slots, cfg.num_splits, cfg.block_m) == (RING_SLOTS, 2, 16) and RING_SLOTS == 2
    assert heuristic(rows_per_group=16, num_groups=256, **kw).num_splits == 1
    assert heuristic(rows_per_group=8, num_groups=1, **kw).num_splits == 16  # 64 blocks, 4 per split
    assert ring_config(num_groups=128, topk=2048, num_sms=132, slots=3).num_splits == 1
    assert heuristic(rows_per_group=32, num_groups=64, **kw).ring_slots == 0
    assert heuristic(rows_per_group=16, num_groups=128, **{**kw, "ring": False}).ring_slots == 0


@pytest.mark.gpu
@pytest.mark.skipif(not GDC_AVAILABLE, reason="this Triton has no grid dependency control")
@pytest.mark.parametrize("kernel", ["ring", "ws", "triton"])
@pytest.mark.parametrize("written", ["q", "cache", "indices"])
def test_gpu_sparse_decode_waits_for_the_kernel_before(kernel, written, call_counter, late_copy):
    """On Hopper the sparse decode kernels and their combine are programmatic dependent launches (each launch
    overlaps the previous kernel's end), so each must touch q, the cache and the indices only after the kernel
    before it has finished. A kernel right before the launcher lets its dependents launch, spins for 3 ms and
    only then writes the new q, cache or index rows (see the `late_copy` fixture): a kernel (ring at 16 heads,
    warp-specialized at 64 heads of the rope-aware FP8 row, Triton at 32 heads) that read before waiting would
    see the old values. Split in three, so the combine runs too."""
    from pagedmla.ops import _triton_sparse_decode
    from pagedmla.ops._triton_decode import programmatic_launch
    from pagedmla.ops._triton_sparse_decode import sparse_decode

    if not programmatic_launch(torch.device("cuda"), False):
        pytest.skip("the decode kernels launch plainly here (not Hopper, or PROGRAMMATIC_LAUNCH off)")
    heads, fp8 = {"ring": (16, False), "ws": (64, True), "triton": (32, False)}[kernel]
    launches = {"ring": call_counter(_triton_sparse_decode, "_launch_ring"),
                "ws": call_counter(_triton_sparse_decode, "_launch_ws")}
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(11)
    lengths = [700, 1200, 256]
    pb = make_paged_batch([900, 1500, 300], [1, 1, 1], head_size=V32_RANK + V32_ROPE, page_size=64, seed=11,
                          num_layers=2, dtype=torch.float32 if fp8 else torch.bfloat16)
    host_kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=V32_ROPE) if fp8 else pb.kv
    idx = _index_rows(pb, 1280, lengths, gen)
    q = torch.randn(pb.num_rows, heads, V32_RANK + V32_ROPE, generator=gen).bfloat16()
    kv = host_kv.replace(blocks=host_kv.blocks.to(dev), scales=None if not fp8 else host_kv.scales.to(dev),
                         cache_lengths=host_kv.cache_lengths.to(dev), lookup_table=host_kv.lookup_table.to(dev))
    q_d, idx_d, offsets = q.to(dev), idx.to(dev), pb.input_row_offsets.to(dev)
    lengths_d = torch.tensor(lengths, dtype=I32, device=dev)
    if written == "q":
        target, new = q_d, (torch.randn(q.shape, generator=gen) * 2).bfloat16().to(dev)
    elif written == "cache":
        # every key negated (NaN stays NaN): the e4m3 latent's sign bits flipped, the bf16 rows negated
        target, new = kv.blocks, -kv.blocks if not fp8 else kv.blocks.view(torch.uint8).clone()
        if fp8:
            new[..., :V32_RANK] ^= 0x80
            new = new.view(kv.blocks.dtype)
    else:
        target, new = idx_d, _index_rows(pb, 1280, lengths, gen).to(dev)
    out = torch.full((pb.num_rows, heads, V32_RANK), float("nan"), dtype=torch.bfloat16, device=dev)
    lse = torch.full((pb.num_rows, heads), float("nan"), device=dev)

    def decode():
        sparse_decode(q_d, offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales, 1, 0.1, 0, -1, 3, out,
                      lse, qk_rope_head_dim=V32_ROPE, rope_aware=fp8, indices=idx_d, topk_lengths=lengths_d)

    decode()  # compiled before the timed part: a compile would outlast the spin
    late_copy(new, target, decode)
    host_kv = host_kv.replace(blocks=kv.blocks.cpu())
    _check_layer1(q_d.cpu(), pb.input_row_offsets, host_kv, idx_d.cpu(), lengths, None, fp8, out, lse)
    assert {name: count[0] for name, count in launches.items()} == {
        name: 2 if name == kernel else 0 for name in launches}


# ---- the warp-specialized Gluon kernel (64-row tiles, rope-aware FP8 row, bf16 q; Hopper) ----

WS_CASES = [
    # heads, page size, cached / new tokens, top-k lengths (0: no key; 20: one block, so consumer 1 has none; 90:
    # an odd number of blocks, the last pair without block b), sink, programs per index row (None: the
    # heuristic's, which splits these small batches; 1: whole rows, the path of batches that fill the GPU; 3)
    pytest.param(64, 64, [3000, 5200, 90], [2, 1, 1], [2048, 1900, 20], True, None, id="H64-ps64-sink"),
    pytest.param(128, 64, [3000, 900], [1, 2], [2048, 90], False, None, id="H128-ps64"),
    pytest.param(128, 16, [700, 300, 50], [1, 2, 1], [600, 0, 20], True, 1, id="H128-ps16-whole-rows-len0-sink"),
    pytest.param(64, 1, [300, 260], [2, 1], [250, 200], False, 3, id="H64-ps1-split3"),
    pytest.param(192, 64, [1500], [1], [1400], True, 1, id="H192-whole-rows-sink"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("heads, page_size, cache, new, lengths, sink, parts", WS_CASES)
def test_gpu_sparse_ws_matches_reference(heads, page_size, cache, new, lengths, sink, parts, call_counter):
    """The public op runs the warp-specialized kernel for multiples of 64 heads over the rope-aware FP8 row (its
    launches are counted, so a dispatch regression that falls back to the Triton kernel fails here)."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    _ring_case(heads, "fp8", cache=cache, new=new, lengths=lengths, page_size=page_size, sink=sink, seed=heads,
               parts=parts)
    assert launches[0] == 1


@pytest.mark.gpu
def test_gpu_sparse_ws_lengths_of_every_column(call_counter):
    """Top-k lengths equal to the index columns (no column past a row's length), 128 heads."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    _ring_case(128, "fp8", cache=[1500, 700], new=[1, 2], lengths=[640, 640], sink=True, seed=8, parts=1, topk=640)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("parts", [1, 2], ids=["whole-rows", "split2"])
def test_gpu_sparse_ws_masked_first_block_and_very_negative_logits(parts, call_counter):
    """A pair whose block a holds no key (32 entries of -1) before keys whose logits are all below -128 in base 2
    (q opposite to every key): rescaling the empty block a by exp2(-m_b) overflowed (0 * inf: a NaN output with
    LSE -inf); the answer must match the reference, whole and with each split starting on such a pair."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(12)
    pb = make_paged_batch([200], [1], head_size=576, page_size=64, seed=12, spare_blocks=1, dtype=torch.float32)
    v = torch.randn(576, generator=gen)
    used = pb.kv.lookup_table[0, :pb.kv.lookup_table.shape[1]].long()
    used = used[(used >= 0) & (used < pb.kv.num_blocks)]
    pb.kv.blocks[used] = v  # every key is v (unused slots keep their NaN)
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    # blocks of 32 entries: [-1 x 32, keys x 32] twice, so each split of two starts on an empty block a
    phys = torch.tensor(_physical(pb, 0, range(64)), dtype=I32)
    idx = torch.full((1, 128), -1, dtype=I32)
    idx[0, 32:64], idx[0, 96:128] = phys[:32], phys[32:]
    q = (-2 * v).expand(1, 64, 576).contiguous().bfloat16()  # logits about -2 |v|^2 * 0.1 * log2(e), below -128
    kw = {"mask": "null", "indices": idx, "topk_lengths": torch.tensor([128], dtype=I32), "q_scale": None,
          "per_token_scale_rope_aware": True, "qk_rope_head_dim": 64, "attn_sink": None}
    want, want_lse = _reference32(q, pb.input_row_offsets, kv, 1, 0.1, kw)
    assert (want_lse < -89).all()  # every logit below -128 in base 2 (LSE >= the largest logit)
    low, low_lse = _lowprec(q, None, kv, 1, idx, [128], {"offsets": pb.input_row_offsets.tolist()}, 0.1, None, 512,
                            True, 64)
    dkv = kv.replace(blocks=kv.blocks.to(dev), scales=kv.scales.to(dev), cache_lengths=kv.cache_lengths.to(dev),
                     lookup_table=kv.lookup_table.to(dev))
    got, got_lse = pm.mla_decode_kv_cache_ragged(
        q.to(dev), pb.input_row_offsets.to(dev), dkv, 1, 0.1, mask="null", indices=idx.to(dev),
        topk_lengths=kw["topk_lengths"].to(dev), qk_rope_head_dim=64, per_token_scale_rope_aware=True,
        num_partitions=parts, return_lse=True, backend="triton")
    assert launches[0] == 1
    eps = _bf16_eps(want, [kv], True, 64)
    assert_close_to_reference(got.float().cpu(), want, _envelope(low, want, -1), eps=eps)
    assert_close_to_reference(got_lse.cpu(), want_lse, _envelope(low_lse, want_lse, -1), eps=1e-4, name="lse")


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 2, 40], ids=["split1", "split2", "split40"])
def test_gpu_sparse_ws_splits(splits, call_counter):
    """One program per index row, two, and more programs than a short row has blocks (empty splits), with a sink
    (which the combine applies when rows are split)."""
    from pagedmla.configs.sparse_decode import ws_config
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    cfg = dataclasses.replace(ws_config(num_tokens=1, num_heads=64, topk=2048, num_sms=132), num_splits=splits)
    _ring_case(64, "fp8", cache=[2500, 800, 64], new=[1, 2, 1], lengths=[2000, 300, 64], sink=True, config=cfg,
               seed=splits)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("q_mult", [3e5, 2e-6, 0.0], ids=["huge-q", "tiny-q", "zero-q"])
def test_gpu_sparse_ws_q_range(q_mult, call_counter):
    """q of extreme magnitudes (logits far past exp2's range unless shifted by the running max; and tiny ones)
    and an all-zero q (uniform weights) on the warp-specialized kernel."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    _ring_case(64, "fp8", cache=[900, 400], new=[1, 2], lengths=[700, 300], seed=3, q_mult=q_mult)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("fold", [False, True], ids=["per-token-rows", "fold"])
def test_gpu_sparse_ws_v32_shape(fold, call_counter):
    """DeepSeek-V3.2's call at 128 heads (two query tokens per sequence, top-k 2048, sink), each token's own index
    row or the sequence's shared one (fold_shared_index: the second token's row is poisoned on the device, so
    only the first token's row gives the answer), on the warp-specialized kernel."""
    from pagedmla.ops import _triton_sparse_decode

    launches = call_counter(_triton_sparse_decode, "_launch_ws")
    _v32_case(128, "rope", "bf16", fold=fold, sink=True, seed=6, poison_followers=fold)
    assert launches[0] == 1


def test_sparse_ws_dispatch_rules(monkeypatch):
    """Which calls the warp-specialized kernel takes (Hopper patched in; CPU tensors): a bf16 q with the
    rope-aware FP8 row and its scales, a multiple of 64 heads, 512 + 64 dims, a bf16 output, no extra stream,
    no q_scale, 16-byte aligned cache rows."""
    from pagedmla.ops import _triton_sparse_decode as sd

    monkeypatch.setattr(sd, "_RING_AVAILABLE", True)
    monkeypatch.setattr(sd, "is_hopper", lambda device: True)
    fp8 = torch.empty(4, 1, 2, 64, 1, 640, dtype=torch.float8_e4m3fn)
    scales = torch.empty(4, 1, 2, 64, 1, 1)
    q = torch.empty(3, 128, 576, dtype=torch.bfloat16)
    out = torch.empty(3, 128, 512, dtype=torch.bfloat16)
    base = dict(rope_aware=True, has_extra=False)
    assert sd.sparse_ws_ready(q, fp8, out, scales, None, **base)
    assert sd.sparse_ws_ready(q[:, :64].contiguous(), fp8, out[:, :64], scales, None, **base)
    assert not sd.sparse_ws_ready(q[:, :96].contiguous(), fp8, out[:, :96], scales, None, **base)
    # a head slice of a bigger q: its rows are not `token * H + head` rows of one 2-D view (TMA)
    assert not sd.sparse_ws_ready(q[:, :64], fp8, out[:, :64], scales, None, **base)
    assert not sd.sparse_ws_ready(q, fp8, out, scales, None, rope_aware=True, has_extra=True)
    assert not sd.sparse_ws_ready(q, fp8, out, None, None, **base)
    assert not sd.sparse_ws_ready(q, fp8, out, scales.double(), None, **base)
    assert not sd.sparse_ws_ready(q, fp8, out, scales, torch.ones(3), **base)
    assert not sd.sparse_ws_ready(q, fp8, out.half(), scales, None, **base)
    assert not sd.sparse_ws_ready(q.half(), fp8, out, scales, None, **base)
    bf16 = torch.empty(4, 1, 2, 64, 1, 576, dtype=torch.bfloat16)
    assert not sd.sparse_ws_ready(q, bf16, out, None, None, rope_aware=False, has_extra=False)
    # FP8 rows 656 bytes apart: the rope part's bf16 view has a stride of 328 elements, not a multiple of 16
    assert not sd.sparse_ws_ready(q, torch.empty(4, 1, 2, 64, 1, 656, dtype=torch.float8_e4m3fn)[..., :640], out,
                                  scales, None, **base)
    monkeypatch.setattr(sd, "is_hopper", lambda device: False)
    assert not sd.sparse_ws_ready(q, fp8, out, scales, None, **base)


def test_sparse_ws_config_rejected_where_it_cannot_run(monkeypatch):
    """A config asking for the warp-specialized kernel on a call it cannot take is a ValueError naming the
    config, not a launch."""
    from pagedmla.configs.sparse_decode import ws_config
    from pagedmla.ops import _triton_sparse_decode as sd

    monkeypatch.setattr(sd, "interpreter_enabled", lambda: False)
    pb = make_paged_batch([40], [1], head_size=576, page_size=16, seed=1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="Invalid config: expected ws False"):
        sd.sparse_decode(torch.zeros(1, 64, 576, dtype=torch.bfloat16), pb.input_row_offsets, pb.kv.blocks,
                         pb.kv.cache_lengths, pb.kv.lookup_table, None, 0, 0.1, 0, -1, 1,
                         torch.empty(1, 64, 512, dtype=torch.bfloat16), torch.empty(1, 64),
                         indices=torch.zeros(1, 32, dtype=I32), topk_lengths=torch.ones(1, dtype=I32),
                         config=ws_config(num_tokens=1, num_heads=64, topk=32, num_sms=132))


def test_sparse_ws_heuristic():
    """The warp-specialized config: 64 rows, 32-key blocks; index rows split only when the programs (tokens x
    64-head tiles) alone leave SMs idle, and never below 4 blocks per split."""
    from pagedmla.configs.sparse_decode import ws_config

    cfg = ws_config(num_tokens=128, num_heads=128, topk=2048, num_sms=132)
    assert (cfg.ws, cfg.block_m, cfg.block_n, cfg.num_splits) == (True, 64, 32, 1)
    assert ws_config(num_tokens=2, num_heads=128, topk=2048, num_sms=132).num_splits == 16  # 64 blocks, 4 each
    assert ws_config(num_tokens=16, num_heads=64, topk=2048, num_sms=132).num_splits == 8
    assert ws_config(num_tokens=1, num_heads=64, topk=64, num_sms=132).num_splits == 1


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["ring", "ws"])
def test_gpu_sparse_gluon_cuda_graph_replay(kernel, call_counter):
    """A captured sparse decode on a Gluon kernel (the ring kernel at 16 heads of a bf16 cache, the
    warp-specialized one at 64 heads of the rope-aware FP8 row; split index rows and their combine) replays with
    new queries, indices, top-k lengths and cache contents (and FP8 scales), matching the reference each time."""
    from pagedmla.ops import _triton_sparse_decode

    fp8 = kernel == "ws"
    dev = torch.device("cuda")
    steps = [([900, 400], [1, 2], [700, 300]), ([300, 1200], [2, 1], [256, 1100]), ([64, 64], [1, 2], [0, 64])]
    rows, heads, topk = 3, 64 if fp8 else 16, 1200

    def batch(cache, new, seed, spare):
        pb = make_paged_batch(cache, new, head_size=576, page_size=64, seed=seed, spare_blocks=spare,
                              dtype=torch.float32 if fp8 else torch.bfloat16)
        return pb, pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64) if fp8 else pb.kv

    gen = torch.Generator().manual_seed(9)
    first, first_kv = batch(steps[0][0], steps[0][1], 9, 30)
    kv = first_kv.replace(blocks=first_kv.blocks.to(dev), scales=first_kv.scales.to(dev) if fp8 else None,
                          cache_lengths=first_kv.cache_lengths.to(dev), lookup_table=first_kv.lookup_table.to(dev))
    offsets = first.input_row_offsets.to(dev)
    q = torch.zeros(rows, heads, 576, dtype=torch.bfloat16, device=dev)
    idx = torch.full((rows, topk), -1, dtype=I32, device=dev)
    lengths = torch.zeros(2, dtype=I32, device=dev)
    out = torch.empty(rows, heads, 512, dtype=torch.bfloat16, device=dev)
    call = {"mask": "null", "indices": idx, "topk_lengths": lengths, "output": out, "qk_rope_head_dim": 64,
            "per_token_scale_rope_aware": fp8, "return_lse": True, "backend": "triton"}
    launches = call_counter(_triton_sparse_decode, "_launch_ws" if fp8 else "_launch_ring")
    pm.mla_decode_kv_cache_ragged(q, offsets, kv, 0, 0.1, **call)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = pm.mla_decode_kv_cache_ragged(q, offsets, kv, 0, 0.1, **call)
    for i, (cache, new, lens) in enumerate(steps):
        pb, step_kv = batch(cache, new, 10 + i, 2)
        n = step_kv.blocks.shape[0]
        assert n <= kv.blocks.shape[0]
        if fp8:
            kv.blocks.view(torch.uint8).fill_(0x7F)  # e4m3 NaN in every row the step does not use
            kv.scales.fill_(float("nan"))
            kv.scales[:n].copy_(step_kv.scales)
        else:
            kv.blocks.fill_(float("nan"))
        kv.blocks[:n].copy_(step_kv.blocks)
        offsets.copy_(pb.input_row_offsets)
        step_idx = _index_rows(pb, topk, lens, gen)
        idx.copy_(step_idx)
        lengths.copy_(torch.tensor(lens, dtype=I32))
        q_step = (torch.randn(rows, heads, 576, generator=gen) * (0.5 if fp8 else 1.0)).bfloat16()
        q.copy_(q_step)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        kw = {"mask": "null", "indices": step_idx, "topk_lengths": torch.tensor(lens, dtype=I32), "q_scale": None,
              "per_token_scale_rope_aware": fp8, "qk_rope_head_dim": 64}
        want, want_lse = _reference32(q_step, pb.input_row_offsets, step_kv, 0, 0.1, kw)
        low, low_lse = _lowprec(q_step, None, step_kv, 0, step_idx, lens, {"offsets": pb.input_row_offsets.tolist()},
                                0.1, None, 512, fp8, 64)
        eps = _bf16_eps(want, [step_kv], fp8, 64)
        assert_close_to_reference(out.float().cpu(), want, _envelope(low, want, -1), eps=eps, name=f"step {i}")
        assert_close_to_reference(lse.cpu(), want_lse, _envelope(low_lse, want_lse, -1), eps=1e-4,
                                  name=f"lse step {i}")
    assert launches[0] == 2  # the warm-up call and the capture; replays launch nothing from the host


