"""Regressions from review: strided metadata, stale plans, fold promises over both sparse streams, and
explicit sparse splits. Each was once accepted and gave a wrong answer (or, on GPU, a fault)."""

import pytest
import torch

import pagedmla as pm
from pagedmla.ops import _triton_sparse_decode
from pagedmla.ops._triton_sparse_decode import _split_count
from pagedmla.testing import assert_close, make_paged_batch

HEAD, ROPE = 80, 16


def _batch(cache=(5, 9), new=(2, 1), seed=0):
    return make_paged_batch(list(cache), list(new), head_size=HEAD, page_size=4, seed=seed)


def _strided(t):
    """The same values with a stride of 2 in the last dimension."""
    wide = torch.stack([t, torch.zeros_like(t)], dim=-1)
    return wide[..., 0]


def test_strided_cache_lengths_and_lookup_table_are_rejected():
    pb = _batch()
    with pytest.raises(ValueError, match="Invalid layout of cache_lengths"):
        pb.kv.replace(cache_lengths=_strided(pb.kv.cache_lengths))
    with pytest.raises(ValueError, match="Invalid layout of lookup_table"):
        pb.kv.replace(lookup_table=_strided(pb.kv.lookup_table))


@pytest.mark.parametrize("arg", ["attn_sink", "input_row_offsets"])
def test_strided_decode_metadata_is_rejected(arg):
    pb = _batch()
    q = torch.randn(pb.num_rows, 2, HEAD)
    kw = {"attn_sink": torch.randn(2), "input_row_offsets": pb.input_row_offsets}
    kw[arg] = _strided(kw[arg])
    offsets = kw.pop("input_row_offsets")
    with pytest.raises(ValueError, match=f"Invalid layout of {arg}"):
        pm.mla_decode_kv_cache_ragged(q, offsets, pb.kv, 0, 0.3, qk_rope_head_dim=ROPE, backend="reference", **kw)


def test_strided_gamma_is_rejected():
    pb = _batch()
    with pytest.raises(ValueError, match="Invalid layout of gamma"):
        pm.rms_norm_key_cache(pb.kv, _strided(torch.randn(64)), 1e-6, 0, pb.input_row_offsets, rms_norm_cols=64)


def test_plan_for_fewer_query_tokens_is_rejected():
    small = _batch(new=(1, 1))
    plan = pm.mla_decode_plan(small.input_row_offsets, small.kv, num_heads=2, backend="reference")
    pb = _batch(new=(3, 1))
    q = torch.randn(pb.num_rows, 2, HEAD)
    with pytest.raises(ValueError, match="Invalid plan: expected a plan with max_seq_length >= 3"):
        pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, plan=plan, qk_rope_head_dim=ROPE,
                                      backend="reference")


def test_triton_plan_for_other_lengths_is_rejected_and_a_refill_fixes_it():
    """A Triton plan's schedule is cut for the lengths it was built with: on other lengths the kernels would leave
    keys out or read partials never written (a wrong answer, with no error, on a GPU). Where the values are free to
    read (CPU tensors) the call raises; refilling the plan in place makes the same call right."""
    early = _batch(cache=(5, 9), new=(1, 1))
    plan = pm.mla_decode_plan(early.input_row_offsets, early.kv, num_heads=2, backend="triton")
    later = _batch(cache=(61, 36), new=(1, 1), seed=1)
    q = torch.randn(later.num_rows, 2, HEAD)

    def decode(**kw):
        return pm.mla_decode_kv_cache_ragged(q, later.input_row_offsets, later.kv, 0, 0.3, qk_rope_head_dim=ROPE, **kw)
    with pytest.raises(ValueError, match="built for other lengths; refill it each step"):
        decode(plan=plan, backend="triton")
    assert pm.mla_decode_plan(later.input_row_offsets, later.kv, num_heads=2, out=plan) is plan
    assert_close(decode(plan=plan, backend="triton"), decode(backend="reference"), atol=2e-5, rtol=1e-5)


def test_plan_refill_keeps_its_backend():
    """`out=` refills a plan for the backend it was built for: asking for another one is an error at the refill,
    not a mismatch found later by the decode."""
    pb = _batch()
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=2, backend="reference")
    with pytest.raises(ValueError, match="Invalid backend: expected 'auto' or 'reference'"):
        pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=2, backend="triton", out=plan)
    assert pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=2, backend="reference", out=plan) is plan


def _physical(pb, b, positions):
    table = pb.kv.lookup_table[b].tolist()
    return [table[p // pb.kv.page_size] * pb.kv.page_size + p % pb.kv.page_size for p in positions]


def test_fold_promise_covers_the_extra_stream():
    pb = _batch(cache=(8,), new=(2,))
    extra = make_paged_batch([6], [0], head_size=HEAD, page_size=2, seed=1)
    idx = torch.tensor([_physical(pb, 0, [0, 3, 5])] * 2, dtype=torch.int32)
    extra_idx = torch.tensor([_physical(extra, 0, [1, 2]), _physical(extra, 0, [4, 5])], dtype=torch.int32)
    with pytest.raises(ValueError, match="share one extra_indices row"):
        pm.mla_decode_kv_cache_ragged(
            torch.randn(2, 2, HEAD), pb.input_row_offsets, pb.kv, 0, 0.3, mask="null", indices=idx,
            topk_lengths=torch.tensor([3], dtype=torch.int32), extra_k=extra.kv, extra_indices=extra_idx,
            extra_topk_lengths=torch.tensor([2], dtype=torch.int32), fold_shared_index=True, qk_rope_head_dim=ROPE,
            backend="reference")


class _GridSpy:
    """Stands in for a Triton kernel and records the grid of each launch."""

    def __init__(self, kernel):
        self.kernel, self.grids = kernel, []

    def __getitem__(self, grid):
        self.grids.append(grid)
        return self.kernel[grid]


def test_explicit_sparse_split_is_honoured(monkeypatch):
    """num_partitions=3 gives each query token's index list 3 programs (the grid's second axis) and a combine;
    1 gives one program and no combine; both match the reference."""
    spy = _GridSpy(_triton_sparse_decode._mla_sparse_decode_kernel)
    monkeypatch.setattr(_triton_sparse_decode, "_mla_sparse_decode_kernel", spy)
    combine = _GridSpy(_triton_sparse_decode._mla_sparse_decode_combine_kernel)
    monkeypatch.setattr(_triton_sparse_decode, "_mla_sparse_decode_combine_kernel", combine)
    assert _split_count(3, 1) == 3
    assert _split_count(0, 2) == 2
    pb = _batch(cache=(20, 13), new=(2, 1))
    q = torch.randn(pb.num_rows, 2, HEAD)
    offs = pb.input_row_offsets.tolist()
    rows = []
    for b in range(2):
        phys = _physical(pb, b, range(pb.totals[b]))
        rows += [phys[:12]] * (offs[b + 1] - offs[b])
    idx = torch.tensor(rows, dtype=torch.int32)
    kw = dict(mask="null", indices=idx, topk_lengths=torch.tensor([12, 12], dtype=torch.int32),
              qk_rope_head_dim=ROPE, return_lse=True)
    want, want_lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, backend="reference", **kw)
    for parts in (1, 3):
        got, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, num_partitions=parts,
                                                 backend="triton", **kw)
        assert_close(got, want, atol=2e-5, rtol=1e-5, name=f"output, {parts} splits")
        assert_close(lse, want_lse, atol=2e-5, rtol=1e-5, name=f"lse, {parts} splits")
        assert spy.grids[-1][1] == parts
        assert len(combine.grids) == (parts > 1)
