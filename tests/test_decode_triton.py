"""The Triton MLA decode (plan, dense kernel, combine) against the float32 reference.

CPU tier: the Triton interpreter at tiny sizes (64 latent + 16 rope, a few heads), float32 and low precision,
every mask, multi-token decode with n_b = 0, sinks, LSE, page sizes 1/3/16, split schedules, the schedule's
invariants, and one case at DeepSeek's 576/512. GPU tier (`-m gpu`): DeepSeek shapes in bf16 at 16, 20 and 128
heads, page sizes 1/64/128, and a CUDA-graph replay with new lengths, tables and inputs.
Caches come from `make_paged_batch` (NaN in unused slots, shuffled tables, huge ids past the used pages);
outputs are pre-filled with NaN so an unwritten row shows.
"""

import dataclasses
import itertools
import math

import pytest
import torch
import triton
import triton.language as tl

import pagedmla as pm
from pagedmla.cache import KVCacheParams, PagedKVCacheCollection
from pagedmla.configs.decode import (
    MAX_GRID_Y,
    RING,
    WARP_SPECIALIZED,
    WS16,
    CombineConfig,
    DecodeConfig,
    DecodePlanConfig,
    combine_heuristic,
    fit_combine_grid,
    heuristic,
)
from pagedmla.kernels import mla_decode
from pagedmla.kernels.common import GDC_AVAILABLE
from pagedmla.kernels.fp8 import _cast
from pagedmla.masks import visible
from pagedmla.ops import _triton_decode
from pagedmla.ops._dispatch import interpreter_enabled
from pagedmla.testing import assert_close, assert_close_to_reference, make_paged_batch

LATENT, ROPE = 64, 16
HEAD = LATENT + ROPE
SCALE = 0.3
MASKS = [("null", -1), ("causal", -1), ("sliding_window_causal", 3), ("sliding_window_noncausal", 5),
         ("chunked", 4), ("chunked_causal", 4)]


def as_float32(kv):
    """The same cache with float32 blocks (the reference's input for a low-precision kernel)."""
    p = kv.params
    params = KVCacheParams(p.num_heads, p.head_size, p.is_mla, p.page_size, p.num_layers, torch.float32)
    return PagedKVCacheCollection(kv.blocks.float(), kv.cache_lengths, kv.lookup_table, params,
                                  max_seq_length=kv.max_seq_length, max_cache_length=kv.max_cache_length)


def reference(pb, q, mask="causal", window=-1, sink=None, rope=ROPE):
    return pm.mla_decode_kv_cache_ragged(q.float(), pb.input_row_offsets, as_float32(pb.kv), 1, SCALE, mask=mask,
                                         local_window_size=window, return_lse=True, attn_sink=sink,
                                         qk_rope_head_dim=rope, backend="reference")


def lowprec_reference(pb, q, ref_lse, mask="causal", window=-1, sink=None, rope=ROPE):
    """The reference's math with the kernel's roundings: softmax weights and the output in q's dtype (rows
    have a visible key in dense decode, so the row max is finite)."""
    dt = q.dtype
    latent = q.shape[-1] - rope
    out = torch.zeros(q.shape[0], q.shape[1], latent, device=q.device)
    offs = pb.input_row_offsets.tolist()
    for b in range(len(offs) - 1):
        g0, g1 = offs[b], offs[b + 1]
        if g1 == g0:
            continue
        keys = pb.dense_rows(b, 1)[:, 0].float()
        n = keys.shape[0]
        q_pos = torch.arange(n - (g1 - g0), n, device=q.device).view(-1, 1, 1)
        vis = visible(q_pos, torch.arange(n, device=q.device).view(1, 1, -1), n, pm.MASKS[mask], max(window, 0))
        logits = SCALE * torch.einsum("shd,nd->shn", q[g0:g1].float(), keys).masked_fill(~vis, float("-inf"))
        # like the kernel: weights relative to the row max are rounded, their float32 sum is not
        weights = torch.exp(logits - logits.amax(-1, keepdim=True))
        o = (weights.to(dt).float() @ keys[:, :latent]) / weights.sum(-1, keepdim=True)
        if sink is not None:
            o = o * torch.sigmoid(ref_lse[g0:g1] - sink).unsqueeze(-1)
        out[g0:g1] = o
    return out.to(dt)


def run_triton(pb, q, *, mask="causal", window=-1, sink=None, parts=None, plan=None, rope=ROPE):
    out = torch.full((q.shape[0], q.shape[1], q.shape[2] - rope), float("nan"), dtype=q.dtype, device=q.device)
    got, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 1, SCALE, mask=mask,
                                             local_window_size=window, output=out, return_lse=True,
                                             attn_sink=sink, num_partitions=parts, plan=plan,
                                             qk_rope_head_dim=rope, backend="triton")
    assert got is out
    return got, lse


def check_fp32(got, lse, want, want_lse, atol=2e-5):
    assert_close(got, want, atol=atol, rtol=1e-5)
    assert_close(lse, want_lse, atol=atol, rtol=1e-5, name="lse")


def check_lowprec(pb, q, got, lse, want, want_lse, *, mask="causal", window=-1, sink=None, rope=ROPE):
    low = lowprec_reference(pb, q, want_lse, mask, window, sink, rope)
    # one rounding step of the output's largest values on top of twice the emulated error
    assert_close_to_reference(got, want, low, eps=torch.finfo(q.dtype).eps * float(want.abs().max()))
    assert_close(lse, want_lse, atol=1e-3, rtol=1e-4, name="lse")


def batch(cache, new, *, heads=4, page_size=3, dtype=torch.float32, seed=0, head_size=HEAD, device="cpu"):
    pb = make_paged_batch(cache, new, head_size=head_size, page_size=page_size, dtype=dtype, num_layers=2,
                          seed=seed, device=device)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(pb.num_rows, heads, head_size, generator=gen).to(dtype).to(device)
    return pb, q


# ---------------------------------------------------------------------------------------------- CPU tier

# CPU tensors need the interpreter; on a GPU machine the gpu tier covers the kernels instead
cpu_tier = pytest.mark.skipif(torch.cuda.is_available() and not interpreter_enabled(),
                              reason="interpreter tier (CPU tensors); the gpu tier runs on this machine")


@cpu_tier
@pytest.mark.parametrize("mask,window", MASKS)
def test_every_mask_with_multi_token_decode(mask, window):
    pb, q = batch([5, 0, 20, 9], [2, 1, 3, 0], seed=3)
    got, lse = run_triton(pb, q, mask=mask, window=window)
    check_fp32(got, lse, *reference(pb, q, mask, window))


@cpu_tier
@pytest.mark.parametrize("cache,new,page_size", [
    pytest.param([0, 1, 2, 3], [1, 1, 1, 1], 1, id="B4-ps1"),
    pytest.param([2, 3, 4, 7], [1, 2, 1, 1], 3, id="B4-page-edges-ps3"),
    pytest.param([15, 16, 0, 30], [1, 1, 4, 3], 16, id="B4-page-edges-ps16"),
])
def test_page_sizes(cache, new, page_size):
    pb, q = batch(cache, new, page_size=page_size, seed=5)
    got, lse = run_triton(pb, q)
    check_fp32(got, lse, *reference(pb, q))


@cpu_tier
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 6)])
def test_split_schedules_match_unsplit(parts, mask, window):
    # keys 45 / 3 / 38 at 16-key blocks: workers start and stop inside sequences and pack short ones
    pb, q = batch([43, 0, 35], [2, 3, 3], page_size=4, seed=7)
    sink = torch.tensor([0.5, -1.0, 2.0, 0.0])
    got, lse = run_triton(pb, q, mask=mask, window=window, parts=parts, sink=sink)
    want, want_lse = reference(pb, q, mask, window, sink)
    check_fp32(got, lse, want, want_lse)
    if parts > 1:
        one, one_lse = run_triton(pb, q, mask=mask, window=window, parts=1, sink=sink)
        check_fp32(got, lse, one, one_lse)


@cpu_tier
@pytest.mark.parametrize("parts", [1, 3], ids=["whole", "split"])
def test_sinks(parts):
    pb, q = batch([30, 2], [1, 2], seed=11)
    sink = torch.tensor([float("inf"), float("-inf"), 0.7, -3.0])
    got, lse = run_triton(pb, q, sink=sink, parts=parts)
    want, want_lse = reference(pb, q, sink=sink)
    check_fp32(got, lse, want, want_lse)
    assert bool((got[:, 0] == 0).all()), "a +inf sink must give output 0"
    assert bool(torch.isfinite(lse).all()), "the sink must not enter the LSE"


@cpu_tier
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_low_precision(dtype):
    pb, q = batch([21, 4, 0], [1, 3, 2], dtype=dtype, page_size=16, seed=13)
    sink = torch.tensor([0.1, 1.0, -1.0, 2.0])
    got, lse = run_triton(pb, q, sink=sink, parts=2)
    want, want_lse = reference(pb, q, sink=sink)
    check_lowprec(pb, q, got, lse, want, want_lse, sink=sink)


@cpu_tier
def test_float32_q_with_bf16_cache():
    pb, q = batch([9, 17], [2, 1], dtype=torch.bfloat16, seed=17)
    q = q.float()
    got, lse = run_triton(pb, q)
    check_fp32(got, lse, *reference(pb, q), atol=1e-4)


@cpu_tier
def test_deepseek_dims():
    pb, q = batch([37, 3], [1, 2], heads=2, head_size=576, page_size=16, dtype=torch.bfloat16, seed=19)
    got, lse = run_triton(pb, q, parts=2, rope=64)
    want, want_lse = reference(pb, q, rope=64)
    check_lowprec(pb, q, got, lse, want, want_lse, rope=64)


@cpu_tier
@pytest.mark.parametrize("heads,new,block_m", [
    pytest.param(4, [6, 1, 0], 16, id="H4-q6-three-tiles"),
    pytest.param(5, [3, 2, 1], 16, id="H5-odd-heads-tile-straddles-tokens"),
])
def test_row_tiles(heads, new, block_m):
    pb, q = batch([10, 33, 4], new, heads=heads, seed=23)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=heads, num_partitions=3, backend="triton")
    out = torch.full((q.shape[0], heads, LATENT), float("nan"))
    lse = torch.full((q.shape[0], heads), float("nan"))
    cfg = DecodeConfig(block_m=block_m, block_n=16, num_warps=1, num_stages=1)
    _triton_decode.launch_decode(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths, pb.kv.lookup_table,
                                 1, SCALE, pm.MASKS["chunked_causal"], 5, out, lse, plan.schedule,
                                 max_seq_length=max(new), qk_rope_head_dim=ROPE, config=cfg)
    check_fp32(out, lse, *reference(pb, q, "chunked_causal", 5))


@cpu_tier
def test_plan_decides_long_pieces_and_the_op_passes_it_on(monkeypatch):
    """A Triton plan decides on the host, from its longest sequence, whether its pieces are long
    (`DecodePlan.long_pieces`: the 16-row FP8 decode's kernel choice), a refill keeps it (a captured graph's
    launches stay fixed), and the public op hands it to the dense launcher (recorded here in place of the
    launch; the sparse path takes no such argument)."""
    pb, _ = batch([12, 40], [2, 1], seed=29)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=3, backend="triton")
    assert plan.long_pieces is False
    # one worker, 24 blocks of 64 keys: long (configs.decode.WS16_RS_MIN_BLOCKS: 12)
    long_pb, long_q = batch([24 * 64 - 1], [1], seed=5)
    long_plan = pm.mla_decode_plan(long_pb.input_row_offsets, long_pb.kv, num_heads=4, num_partitions=1,
                                   backend="triton")
    assert long_plan.long_pieces is True
    short_pb, _ = batch([10], [1], seed=7)  # a refill for a short step keeps the plan's choice
    assert pm.mla_decode_plan(short_pb.input_row_offsets, short_pb.kv, num_heads=4, out=long_plan).long_pieces
    seen = []
    monkeypatch.setattr(_triton_decode, "launch_decode", lambda *args, **kw: seen.append(kw["long_pieces"]))
    long_plan = pm.mla_decode_plan(long_pb.input_row_offsets, long_pb.kv, num_heads=4, num_partitions=1,
                                   backend="triton")
    pm.mla_decode_kv_cache_ragged(long_q, long_pb.input_row_offsets, long_pb.kv, 1, SCALE, plan=long_plan,
                                  qk_rope_head_dim=ROPE, backend="triton")
    # the same step on three workers: 24 blocks over three pieces (8 each) are short
    split_plan = pm.mla_decode_plan(long_pb.input_row_offsets, long_pb.kv, num_heads=4, num_partitions=3,
                                    backend="triton")
    pm.mla_decode_kv_cache_ragged(long_q, long_pb.input_row_offsets, long_pb.kv, 1, SCALE, plan=split_plan,
                                  qk_rope_head_dim=ROPE, backend="triton")
    assert seen == [True, False]


def test_ws16_kernel_choice(monkeypatch):
    """Which 16-row FP8 kernel a call runs: the register-operand one (`kernels.mla_decode_ws16_rs`) when the
    plan's pieces are long (`pieces_are_long`: `configs.decode.WS16_RS_MIN_BLOCKS` 64-key blocks each, estimated
    from the longest sequence; the cases timed on the H200 fall on the faster side), the widen one on short
    pieces or when the length is unknown (0); `WS16_KERNEL` forces one, and anything else there is a
    ValueError."""
    long = _triton_decode.pieces_are_long
    assert long(64, 4096, 132) and long(128, 4096, 132)
    assert long(32, 4096, 132) and long(8, 16384, 132) and long(256, 1024, 132)
    assert not long(64, 1024, 132) and not long(16, 4096, 132)
    assert not long(1, 16384, 132) and not long(64, 0, 132)
    use = _triton_decode.ws16_use_registers
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", None)
    assert use(True) and not use(False)
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", "registers")
    assert use(False)
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", "widen")
    assert not use(True)
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", "fast")
    with pytest.raises(ValueError, match="WS16_KERNEL"):
        use(True)


@cpu_tier
def test_refresh_plan_in_place():
    pb, _ = batch([12, 40], [2, 1], seed=29)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=3, backend="triton")
    pb2, q2 = batch([33, 1], [1, 2], seed=31)
    assert pm.mla_decode_plan(pb2.input_row_offsets, pb2.kv, num_heads=4, out=plan) is plan
    got, lse = run_triton(pb2, q2, plan=plan)
    check_fp32(got, lse, *reference(pb2, q2))


def simulate_schedule(schedule, cache, new, workers):
    """Which keys each worker covers per sequence, from the schedule's worker rows."""
    batch_size = len(cache)
    rows = schedule.tolist()
    cover = {b: [] for b in range(batch_size)}
    for w in range(workers):
        first, first_key, last, stop_key = rows[1 + w]
        for b in range(first, min(last, batch_size - 1) + 1):
            if new[b] == 0:
                continue
            n = cache[b] + new[b]
            lo = first_key if b == first else 0
            hi = min(stop_key, n) if b == last else n
            if lo < hi:
                cover[b].append((w, lo, hi))
    return cover


@cpu_tier
@pytest.mark.parametrize("workers", [1, 2, 5, 9, 70])
@pytest.mark.parametrize("fixed_cost,tail_cost", [(None, None), (1, 0), (2, 2), (3, 1), (0, 0)])
def test_schedule_covers_every_key_once(workers, fixed_cost, tail_cost):
    cache = [40, 0, 3, 100, 7, 0, 64]
    new = [1, 0, 2, 3, 1, 1, 0]
    pb = make_paged_batch(cache, new, head_size=HEAD, page_size=16, seed=37)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=workers,
                              backend="triton")
    if fixed_cost is not None:
        cfg = DecodePlanConfig(num_workers=workers, granularity=16, fixed_cost=fixed_cost, tail_cost=tail_cost)
        _triton_decode.fill_schedule(plan.schedule, pb.input_row_offsets, pb.kv.cache_lengths, cfg)
    assert plan.num_partitions == workers and tuple(plan.schedule.shape) == (1 + workers + len(cache), 4)
    cover = simulate_schedule(plan.schedule, cache, new, workers)
    rows = plan.schedule.tolist()
    for b, pieces in cover.items():
        n = cache[b] + new[b]
        first, last, slot, zero = rows[1 + workers + b]
        assert zero == 0
        if new[b] == 0:
            assert (first, last, slot) == (-1, -1, -1) and pieces == []
            continue
        keys = sorted((lo, hi) for _, lo, hi in pieces)
        assert keys[0][0] == 0 and keys[-1][1] == n, (b, keys)
        assert all(a[1] == c[0] for a, c in itertools.pairwise(keys)), (b, keys)
        assert [w for w, _, _ in pieces] == list(range(first, last + 1)), (b, pieces, first, last)
        w0_first_seq = rows[1 + first][0]
        assert slot == 2 * first + (0 if w0_first_seq == b else 1)


def equal_sequences_cover(batch_size, workers, *, seed):
    """(cache, new, `simulate_schedule`'s cover) of `batch_size` sequences of 256 keys (16-key units, fixed cost
    2, tail 1) on `workers` workers."""
    cache, new = [16 * 16 - 1] * batch_size, [1] * batch_size
    pb = make_paged_batch(cache, new, head_size=HEAD, page_size=16, seed=seed)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=workers,
                              backend="triton")
    cfg = DecodePlanConfig(num_workers=workers, granularity=16, fixed_cost=2, tail_cost=1)
    _triton_decode.fill_schedule(plan.schedule, pb.input_row_offsets, pb.kv.cache_lengths, cfg)
    return cache, new, simulate_schedule(plan.schedule, cache, new, workers)


@cpu_tier
@pytest.mark.parametrize("batch_size,workers", [(2, 4), (4, 8), (4, 2), (8, 4)])
def test_schedule_splits_equal_sequences_into_equal_pieces(batch_size, workers):
    """Every piece loads q and writes a result: with the fixed cost split between a sequence's start and end,
    equal sequences cut in two (or k whole ones per worker) give every worker the same number of key blocks
    (the whole cost up front gave the first half two blocks fewer than the second)."""
    cache, new, cover = equal_sequences_cover(batch_size, workers, seed=43)
    keys = [0] * workers
    for pieces in cover.values():
        for w, lo, hi in pieces:
            keys[w] += hi - lo
    assert keys == [sum(c + n for c, n in zip(cache, new)) // workers] * workers, keys


@cpu_tier
@pytest.mark.parametrize("batch_size,workers", [(2, 8), (3, 12), (8, 2)])
def test_schedule_whole_pieces_when_units_do_not_divide(batch_size, workers):
    """Equal sequences whose cost does not divide by the pieces (18 units in 4) still fall into whole pieces:
    every worker holds a piece of exactly one sequence (k workers per sequence) or k whole sequences, and none
    is idle (spans of total / W rounded up drifted off the sequences' edges)."""
    _, _, cover = equal_sequences_cover(batch_size, workers, seed=47)
    per_worker = {w: [] for w in range(workers)}
    for b, pieces in cover.items():
        for w, lo, hi in pieces:
            per_worker[w].append((b, lo, hi))
    want = max(1, batch_size // workers)
    assert all(len(p) == want for p in per_worker.values()), per_worker
    if batch_size >= workers:
        assert all(lo == 0 and hi == 256 for p in per_worker.values() for _, lo, hi in p), per_worker


@triton.jit(do_not_specialize=["n", "total", "num_workers"])
def _spans_probe_kernel(w_ptr, x_ptr, start_ptr, worker_ptr, n, total, num_workers, BLOCK: tl.constexpr):
    """`_span_start(w[i])` and `_worker_of(x[i])` for i < n (the plan kernel's span arithmetic, alone)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n
    w = tl.load(w_ptr + i, mask=ok, other=0)
    tl.store(start_ptr + i, mla_decode._span_start(w, total, num_workers), mask=ok)
    x = tl.load(x_ptr + i, mask=ok, other=0)
    tl.store(worker_ptr + i, mla_decode._worker_of(x, total, num_workers), mask=ok)


# (total cost units, workers): w * total past 2^31, exact multiples, cases where the float64 estimate alone is
# one short at w = W, and (W past 2^26) where it is one over (at w = W - 1, and at the last unit's worker)
SPAN_CASES = [(2**31 - 1, 264), (2**31 - 1, 65537), (1_000_003, 132), (2**30 + 7, 1), (987_654_321, 4099),
              (256, 256), (255, 264), (264 * 8_134_407, 264), (65537 * 32767, 65537), (4099 * 523_900, 4099),
              (3 * 715_827_882, 3), (7 * 306_783_378, 7), (2_041_679_537, 1571), (466_951_842, 30315),
              (1_895_036_922, 2762), (134_214_731, 134_214_730), (134_217_732, 67_108_866)]


def check_span_arithmetic(total, workers, device):
    """The plan's spans `floor(w * total / W)` and their inverse (the worker holding unit x) match exact integer
    arithmetic where `w * total` passes 2^31 (the kernel divides in float64 and corrects by the remainder), at
    the first and last units of 256 workers (the first, the last and random ones)."""
    def start_of(w):
        return w * total // workers if total >= workers else min(w, total)

    gen = torch.Generator().manual_seed(workers)
    ws = sorted({0, 1, workers - 1, workers} | set(torch.randint(0, workers + 1, (252,), generator=gen).tolist()))
    xs = [min(max(v, 0), total - 1) for w in ws for v in (start_of(w) - 1, start_of(w), start_of(w) + 1)]
    m = max(len(ws), len(xs))
    w_t = torch.tensor(ws + [0] * (m - len(ws)), dtype=torch.int32, device=device)
    x_t = torch.tensor(xs + [0] * (m - len(xs)), dtype=torch.int32, device=device)
    start = torch.empty(m, dtype=torch.int32, device=device)
    worker = torch.empty(m, dtype=torch.int32, device=device)
    _spans_probe_kernel[(triton.cdiv(m, 256),)](w_t, x_t, start, worker, m, total, workers, BLOCK=256)
    assert start[: len(ws)].tolist() == [start_of(w) for w in ws]
    for x, got in zip(xs, worker[: len(xs)].tolist()):
        # the last w with start_of(w) <= x: start_of is nondecreasing, and exact for w < W
        want = ((x + 1) * workers - 1) // total if total >= workers else x
        assert got == want and start_of(got) <= x < start_of(got + 1), (x, got, want)


@cpu_tier
@pytest.mark.parametrize("total,workers", SPAN_CASES)
def test_span_arithmetic_is_exact(total, workers):
    check_span_arithmetic(total, workers, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("total,workers", SPAN_CASES)
def test_gpu_span_arithmetic_is_exact(total, workers):
    """The same on the GPU (its float64 rounding is the interpreter's, IEEE round to nearest)."""
    check_span_arithmetic(total, workers, "cuda")


def test_plan_config_rejects_a_tail_past_the_fixed_cost():
    with pytest.raises(ValueError, match="tail_cost"):
        DecodePlanConfig(num_workers=4, fixed_cost=1, tail_cost=2)


@cpu_tier
def test_dims_that_are_not_tiles_are_a_missing_feature():
    """kv_lora_rank 64 + rope 8: explicit triton says so; auto (on CPU: the reference) still answers."""
    pb, q = batch([3], [1], head_size=72, seed=41)
    with pytest.raises(NotImplementedError, match="non_pow2_dims"):
        run_triton(pb, q, rope=8)
    out = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.3, qk_rope_head_dim=8)
    assert out.shape == (1, q.shape[1], 64) and bool(torch.isfinite(out).all())


# ---------------------------------------------------------------------------------------------- GPU tier

GPU_CASES = [
    pytest.param(16, 64, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], id="H16-ps64-q1"),
    pytest.param(16, 1, [70, 3, 300], [2, 4, 0], id="H16-ps1-mtp"),
    pytest.param(128, 128, [2000, 127, 5, 700], [1, 2, 1, 3], id="H128-ps128-mtp"),
    pytest.param(20, 64, [517, 64, 1], [1, 1, 1], id="H20-ps64-odd-heads"),
    pytest.param(20, 128, [300, 20], [3, 1], id="H20-ps128-mtp"),
    # batches above 16 take the 64-key tiles at 128 heads
    pytest.param(128, 64, [(37 * i) % 700 for i in range(20)], [1 + i % 2 for i in range(20)],
                 id="H128-ps64-B20-mtp"),
    # larger batches of 16-head sequences (16- and 32-row tiles, the unmasked interior loop, few pieces)
    pytest.param(16, 64, [(53 * i) % 900 for i in range(40)], [1] * 40, id="H16-ps64-B40-q1"),
    pytest.param(16, 16, [(29 * i) % 500 for i in range(36)], [1 + i % 2 for i in range(36)],
                 id="H16-ps16-B36-mtp"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("heads,page_size,cache,new", GPU_CASES)
@pytest.mark.parametrize("mask,window", [("causal", -1), ("null", -1), ("sliding_window_causal", 100),
                                         ("sliding_window_noncausal", 37), ("chunked", 64),
                                         ("chunked_causal", 50)])
def test_gpu_deepseek_shapes(heads, page_size, cache, new, mask, window):
    pb, q = batch(cache, new, heads=heads, head_size=576, page_size=page_size, dtype=torch.bfloat16, seed=43,
                  device="cuda")
    sink = (torch.randn(heads, generator=torch.Generator().manual_seed(3)) if mask == "causal" else None)
    sink = None if sink is None else sink.cuda()
    got, lse = run_triton(pb, q, mask=mask, window=window, sink=sink, rope=64)
    want, want_lse = reference(pb, q, mask, window, sink, rope=64)
    check_lowprec(pb, q, got, lse, want, want_lse, mask=mask, window=window, sink=sink, rope=64)


@pytest.mark.gpu
@pytest.mark.parametrize("parts", [1, 5, 200])
def test_gpu_partitions(parts):
    pb, q = batch([3000, 10, 1500], [1, 2, 1], heads=16, head_size=576, page_size=64, dtype=torch.bfloat16,
                  seed=47, device="cuda")
    got, lse = run_triton(pb, q, parts=parts, rope=64)
    want, want_lse = reference(pb, q, rope=64)
    check_lowprec(pb, q, got, lse, want, want_lse, rope=64)


@pytest.mark.gpu
@pytest.mark.parametrize("q_dtype,cache_dtype", [(torch.float16, torch.float16), (torch.float32, torch.bfloat16)],
                         ids=["fp16", "fp32-q-bf16-cache"])
def test_gpu_other_dtypes(q_dtype, cache_dtype):
    pb, q = batch([800, 5, 64], [1, 3, 2], heads=16, head_size=576, page_size=64, dtype=cache_dtype, seed=49,
                  device="cuda")
    q = q.to(q_dtype)
    got, lse = run_triton(pb, q, rope=64)
    want, want_lse = reference(pb, q, rope=64)
    if q_dtype == torch.float32:
        check_fp32(got, lse, want, want_lse, atol=1e-4)
    else:
        check_lowprec(pb, q, got, lse, want, want_lse, rope=64)


def run_graph_replay(steps, heads, *, rows, max_q, seed, num_partitions=None, on_capture=None):
    """Capture one decode step (every sequence at most `max_q` query tokens), then replay it with each step's
    lengths, tables, cache contents and queries (NaN in the unused slots, huge ids past the used pages),
    matching the reference each time. `on_capture()` runs right after the capture."""
    page_size = 64
    first = make_paged_batch(*steps[0], head_size=576, page_size=page_size, dtype=torch.bfloat16, seed=seed,
                             device="cuda", spare_blocks=80, spare_table_columns=40)
    kv = first.kv.replace(max_seq_length=max_q)
    static_q = torch.randn(rows, heads, 576, device="cuda").to(torch.bfloat16)
    out = torch.full((rows, heads, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = pm.mla_decode_plan(first.input_row_offsets, kv, num_heads=heads, num_partitions=num_partitions,
                              backend="triton")
    call = {"mask": "causal", "output": out, "plan": plan, "return_lse": True, "backend": "triton"}
    pm.mla_decode_kv_cache_ragged(static_q, first.input_row_offsets, kv, 1, SCALE, **call)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = pm.mla_decode_kv_cache_ragged(static_q, first.input_row_offsets, kv, 1, SCALE, **call)
    if on_capture is not None:
        on_capture()
    for i, (cache, new) in enumerate(steps):
        pb = make_paged_batch(cache, new, head_size=576, page_size=page_size, dtype=torch.bfloat16,
                              seed=seed + 6 + i, device="cuda", spare_blocks=80, spare_table_columns=40)
        assert pb.kv.blocks.shape[0] <= kv.blocks.shape[0]
        assert pb.kv.lookup_table.shape[1] <= kv.lookup_table.shape[1]
        kv.blocks.fill_(float("nan"))
        kv.blocks[: pb.kv.blocks.shape[0]].copy_(pb.kv.blocks)
        kv.lookup_table.fill_(2**30)
        kv.lookup_table[:, : pb.kv.lookup_table.shape[1]].copy_(pb.kv.lookup_table)
        kv.cache_lengths.copy_(pb.kv.cache_lengths)
        first.input_row_offsets.copy_(pb.input_row_offsets)
        static_q.copy_(torch.randn(rows, heads, 576, device="cuda").to(torch.bfloat16))
        pm.mla_decode_plan(first.input_row_offsets, kv, num_heads=heads, out=plan)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        pb_view = type(pb)(kv, first.input_row_offsets, list(cache), list(new))
        want, want_lse = reference(pb_view, static_q, rope=64)
        check_lowprec(pb_view, static_q, out, lse, want, want_lse, rope=64)


@pytest.mark.gpu
@pytest.mark.parametrize("heads", [16, 128])
def test_gpu_cuda_graph_replay(heads):
    """Capture one decode step, then replay it with new lengths, tables, cache contents and queries."""
    steps = [([500, 31, 2000], [1, 2, 1]), ([900, 3, 64], [2, 1, 1]), ([0, 1500, 7], [1, 1, 2])]
    run_graph_replay(steps, heads, rows=4, max_q=2, seed=53)


@pytest.mark.gpu
@pytest.mark.skipif(not GDC_AVAILABLE, reason="this Triton has no grid dependency control")
@pytest.mark.parametrize("heads,parts,kernel", [(16, "two-per-sm", "ring"), (128, None, "ws"), (16, 7, "triton")])
@pytest.mark.parametrize("written", ["q", "cache"])
def test_gpu_decode_waits_for_the_kernel_before(heads, parts, kernel, written, call_counter, late_copy):
    """On Hopper the decode kernels and the combine are programmatic dependent launches (their launch overlaps
    the previous kernel's end), so each must read q and the cache only after the kernel before it has finished.
    Right before the decode's launcher, a kernel lets its dependents launch, spins for 3 ms (far longer than the
    host takes to launch the warmed-up decode) and only then writes the new q (or the new cache): a decode kernel
    (ring, warp-specialized or Triton) that read before waiting would see the old values."""
    if not _triton_decode.programmatic_launch(torch.device("cuda"), False):
        pytest.skip("the decode kernels launch plainly here (not Hopper, or PROGRAMMATIC_LAUNCH off)")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pb, q = batch([700, 2000, 63, 1500], [1, 1, 1, 1], heads=heads, head_size=576, page_size=64,
                  dtype=torch.bfloat16, seed=97, device="cuda")
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=heads, backend="triton",
                              num_partitions=2 * sms if parts == "two-per-sm" else parts)
    launches = {"ring": call_counter(_triton_decode, "_launch_ring"),
                "ws": call_counter(_triton_decode, "_launch_ws")}
    target = q if written == "q" else pb.kv.blocks
    new = (torch.randn(target.shape, device="cuda") * 2).to(target.dtype)
    out = torch.full((q.shape[0], heads, 512), float("nan"), dtype=q.dtype, device="cuda")
    lse = torch.full((q.shape[0], heads), float("nan"), device="cuda")

    def decode():
        _triton_decode.launch_decode(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths, pb.kv.lookup_table,
                                     1, SCALE, pm.MASKS["causal"], 0, out, lse, plan.schedule, max_seq_length=1,
                                     qk_rope_head_dim=64)

    decode()  # compiled before the timed part: a compile would outlast the spin
    late_copy(new, target, decode)
    want, want_lse = reference(pb, q, rope=64)
    check_lowprec(pb, q, out, lse, want, want_lse, rope=64)
    assert {name: count[0] for name, count in launches.items()} == {
        name: 2 if name == kernel else 0 for name in launches}


@cpu_tier
def test_reference_helpers_agree():
    """The low-precision oracle equals the reference when nothing is rounded (guards the tolerance helper)."""
    pb, q = batch([6, 11], [2, 1], seed=61)
    want, want_lse = reference(pb, q, "chunked", 4)
    low = lowprec_reference(pb, q, want_lse, "chunked", 4)
    assert_close(low, want, atol=1e-5)
    assert math.isfinite(float(want_lse.min()))


# ---------------------------------------------------------------------------------------------- FP8 caches and q
# The launcher handles FP8 caches and FP8 q; the lead enables the features in ops/decode.py after the GPU tier,
# so until then these tests turn them on for themselves.

FP8 = torch.float8_e4m3fn


@pytest.fixture
def fp8_features(monkeypatch):
    from pagedmla.ops import _dispatch
    key = "mla_decode_kv_cache_ragged"
    have = _dispatch.TRITON_FEATURES.get(key, frozenset())
    monkeypatch.setitem(_dispatch.TRITON_FEATURES, key, have | {"fp8_cache", "fp8_q", "rope_aware"})


def fp8_q(q):
    """q as e4m3 values with a float32 scale per row (amax / 448), and the float32 q they stand for."""
    amax = q.float().abs().amax(dim=(1, 2)).clamp_min(1e-6) / 448.0
    q8 = (q.float() / amax[:, None, None]).to(FP8)
    return q8, amax.contiguous(), q8.float() * amax[:, None, None]


def run_fp8(pb, kv, q, *, q_scale=None, mask="causal", window=-1, sink=None, parts=None, rope=ROPE):
    out_dtype = torch.bfloat16 if q.dtype == FP8 else q.dtype
    rope_aware = kv.params.per_token_scale_rope_aware
    latent = kv.params.head_size - (2 if rope_aware else 1) * rope
    out = torch.full((q.shape[0], q.shape[1], latent), float("nan"), dtype=out_dtype, device=q.device)
    got, lse = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, kv, 1, SCALE, mask=mask,
                                             local_window_size=window, output=out, return_lse=True,
                                             attn_sink=sink, num_partitions=parts, q_scale=q_scale,
                                             per_token_scale_rope_aware=rope_aware, qk_rope_head_dim=rope,
                                             backend="triton")
    assert got is out
    return got, lse


def fp8_reference(pb, kv, q32, *, mask="causal", window=-1, sink=None, rope=ROPE):
    """The float32 reference on the FP8 cache (it dequantizes) with the float32 q the kernel's q stands for."""
    return pm.mla_decode_kv_cache_ragged(q32, pb.input_row_offsets, kv, 1, SCALE, mask=mask,
                                         local_window_size=window, return_lse=True, attn_sink=sink,
                                         per_token_scale_rope_aware=kv.params.per_token_scale_rope_aware,
                                         qk_rope_head_dim=rope, backend="reference")


def fp8_lowprec(pb, kv, q32, dtype, *, mask="causal", window=-1, sink=None, rope=ROPE):
    """The reference's math with the kernel's roundings in `dtype`: the dequantized keys (and V) and the softmax
    weights rounded, the output rounded. Returns (out, lse)."""
    from pagedmla.reference.paged import dequantize_rows
    rows = dequantize_rows(kv.blocks, kv.scales, granularity=kv.params.quantization_granularity,
                           rope_aware=kv.params.per_token_scale_rope_aware, qk_rope_head_dim=rope)
    rows = rows.to(dtype).float()
    latent = q32.shape[-1] - rope
    out = torch.zeros(q32.shape[0], q32.shape[1], latent, device=q32.device)
    lse = torch.zeros(q32.shape[0], q32.shape[1], device=q32.device)
    offs = pb.input_row_offsets.tolist()
    for b in range(len(offs) - 1):
        g0, g1 = offs[b], offs[b + 1]
        if g1 == g0:
            continue
        pos = pb.positions(b)
        blk = torch.tensor([p[0] for p in pos], device=rows.device)
        slot = torch.tensor([p[1] for p in pos], device=rows.device)
        keys = rows[blk, 0, 1, slot][:, 0].to(q32.device)
        n = keys.shape[0]
        q_pos = torch.arange(n - (g1 - g0), n, device=q32.device).view(-1, 1, 1)
        vis = visible(q_pos, torch.arange(n, device=q32.device).view(1, 1, -1), n, pm.MASKS[mask], max(window, 0))
        logits = SCALE * torch.einsum("shd,nd->shn", q32[g0:g1], keys).masked_fill(~vis, float("-inf"))
        weights = torch.exp(logits - logits.amax(-1, keepdim=True))
        o = (weights.to(dtype).float() @ keys[:, :latent]) / weights.sum(-1, keepdim=True)
        row_lse = torch.logsumexp(logits, -1)
        if sink is not None:
            o = o * torch.sigmoid(row_lse - sink).unsqueeze(-1)
        out[g0:g1] = o
        lse[g0:g1] = row_lse
    return out.to(dtype).float(), lse


def check_fp8_lowprec(got, lse, want, want_lse, low, low_lse):
    """`assert_close_to_reference` with the emulated error's envelope: the kernel rounds at other points than
    the emulation (a tile with one scale per key feeds the raw e4m3 values to the MMA and scales the logits), so
    the errors are bounded by the emulation's largest error per row (per call for the LSE), plus one rounding
    step of the largest output (P and the output are rounded to 16 bits)."""
    err = (low - want).abs().nan_to_num(0.0).amax(-1, keepdim=True)
    eps = 2.0 ** -7 * float(want.abs().max())
    assert_close_to_reference(got.float(), want, want + err, eps=eps)
    err_lse = (low_lse - want_lse).abs().nan_to_num(0.0).max()
    assert_close_to_reference(lse, want_lse, want_lse + err_lse, eps=1e-4, name="lse")


@cpu_tier
@pytest.mark.parametrize("page_size", [1, 16], ids=["ps1", "ps16"])
@pytest.mark.parametrize("granularity", [
    pytest.param(16, id="G16-groups"),  # latent: 4 groups of 16 (reshaped); rope: one scale per row
    pytest.param(64, id="G64-one-per-tile"),  # latent and rope: one scale per row (on the logits and P)
    pytest.param(48, id="G48-non-divisor"),  # latent: per-element scales; rope: one per row
    pytest.param(8, id="G8-rope-groups"),  # the rope tile in 2 groups too
])
def test_fp8_cache_float32_q(fp8_features, granularity, page_size):
    pb, q = batch([5, 0, 20, 9], [2, 1, 3, 0], page_size=page_size, seed=67)
    kv = pm.quantize_kv_cache(pb.kv, granularity)
    assert bool(torch.isnan(kv.scales).any()), "the poisoned slots must give NaN scales"
    for mask, window in [("causal", -1), ("sliding_window_causal", 3)]:
        got, lse = run_fp8(pb, kv, q, mask=mask, window=window)
        check_fp32(got, lse, *fp8_reference(pb, kv, q, mask=mask, window=window))


@cpu_tier
@pytest.mark.parametrize("granularity", [16, 48, 12], ids=["G16", "G48", "G12-rope-per-element"])
def test_fp8_cache_split_with_sinks(fp8_features, granularity):
    pb, q = batch([43, 0, 35], [2, 3, 3], page_size=4, seed=71)
    kv = pm.quantize_kv_cache(pb.kv, granularity)
    sink = torch.tensor([0.5, -1.0, 2.0, 0.0])
    got, lse = run_fp8(pb, kv, q, sink=sink, parts=3, mask="sliding_window_causal", window=6)
    check_fp32(got, lse, *fp8_reference(pb, kv, q, sink=sink, mask="sliding_window_causal", window=6))


@cpu_tier
@pytest.mark.parametrize("q_dtype,granularity,page_size", [
    pytest.param(torch.bfloat16, 16, 16, id="bf16q-G16-ps16"),
    pytest.param(torch.bfloat16, 48, 1, id="bf16q-G48-ps1"),
    pytest.param(torch.float16, 64, 16, id="fp16q-G64-ps16"),
    pytest.param(FP8, 16, 16, id="fp8q-G16-ps16"),
    pytest.param(FP8, 48, 1, id="fp8q-G48-ps1"),
])
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 4)], ids=["causal", "swa4"])
def test_fp8_cache_low_precision(fp8_features, q_dtype, granularity, page_size, mask, window):
    pb, q = batch([21, 4, 0, 9], [1, 3, 2, 2], page_size=page_size, seed=73)
    kv = pm.quantize_kv_cache(pb.kv, granularity)
    sink = torch.tensor([0.1, 1.0, -1.0, 2.0])
    if q_dtype == FP8:
        q_in, q_scale, q32 = fp8_q(q)
        dtype = torch.bfloat16
    else:
        q_in, q_scale = q.to(q_dtype), None
        q32, dtype = q_in.float(), q_dtype
    got, lse = run_fp8(pb, kv, q_in, q_scale=q_scale, sink=sink, parts=2, mask=mask, window=window)
    assert got.dtype == dtype
    want, want_lse = fp8_reference(pb, kv, q32, sink=sink, mask=mask, window=window)
    low, low_lse = fp8_lowprec(pb, kv, q32, dtype, sink=sink, mask=mask, window=window)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


@cpu_tier
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float32], ids=["bf16-cache", "fp32-cache"])
def test_fp8_q_with_unquantized_cache(fp8_features, cache_dtype):
    pb, q = batch([9, 17, 3], [2, 1, 3], dtype=cache_dtype, page_size=16, seed=79)
    q8, q_scale, q32 = fp8_q(q)
    got, lse = run_fp8(pb, pb.kv, q8, q_scale=q_scale, mask="sliding_window_causal", window=5)
    assert got.dtype == torch.bfloat16
    want, want_lse = reference(pb, q32, "sliding_window_causal", 5)
    if cache_dtype == torch.float32:
        # float32 math, only the output rounded to bf16 (one step of its largest value)
        assert_close(got.float(), want, atol=2.0 ** -7 * float(want.abs().max()), rtol=0)
        assert_close(lse, want_lse, atol=2e-5, rtol=1e-5, name="lse")
    else:
        low = lowprec_reference(pb, q32.to(torch.bfloat16), want_lse, "sliding_window_causal", 5)
        assert_close_to_reference(got.float(), want, low.float(), eps=2.0 ** -7 * float(want.abs().max()))
        assert_close(lse, want_lse, atol=1e-3, rtol=1e-4, name="lse")


def fp8_q_rope_aware(q, rope=ROPE):
    """q `[T, H, latent + rope]` as the rope-aware FP8 row (e4m3 latent with a scale per token, then the rope
    part as bf16 bytes), its scales, and the float32 q it stands for."""
    latent = q.shape[-1] - rope
    amax = q[..., :latent].float().abs().amax(dim=(1, 2)).clamp_min(1e-6) / 448.0
    lat8 = (q[..., :latent].float() / amax[:, None, None]).to(FP8)
    rope16 = q[..., latent:].to(torch.bfloat16).contiguous()
    q8 = torch.cat([lat8, rope16.view(FP8)], dim=-1).contiguous()
    q32 = torch.cat([lat8.float() * amax[:, None, None], rope16.float()], dim=-1)
    return q8, amax.contiguous(), q32


@cpu_tier
@pytest.mark.parametrize("q_kind,page_size", [
    pytest.param("fp32", 1, id="fp32q-ps1"),
    pytest.param("bf16", 16, id="bf16q-ps16"),
    pytest.param("fp8", 16, id="fp8q-ps16"),
    pytest.param("fp8", 1, id="fp8q-ps1"),
])
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 4)], ids=["causal", "swa4"])
def test_fp8_rope_aware(fp8_features, q_kind, page_size, mask, window):
    pb, q = batch([21, 4, 0, 9], [1, 3, 2, 2], page_size=page_size, seed=83)
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=ROPE)
    assert kv.params.head_size == LATENT + 2 * ROPE
    sink = torch.tensor([0.1, 1.0, -1.0, 2.0])
    if q_kind == "fp8":
        q_in, q_scale, q32 = fp8_q_rope_aware(q)
    else:
        q_in, q_scale = q.to(torch.float32 if q_kind == "fp32" else torch.bfloat16), None
        q32 = q_in.float()
    got, lse = run_fp8(pb, kv, q_in, q_scale=q_scale, sink=sink, parts=2, mask=mask, window=window)
    want, want_lse = fp8_reference(pb, kv, q32, sink=sink, mask=mask, window=window)
    if q_kind == "fp32":
        check_fp32(got, lse, want, want_lse)
        return
    low, low_lse = fp8_lowprec(pb, kv, q32, torch.bfloat16, sink=sink, mask=mask, window=window)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("granularity", [64, 128], ids=["G64", "G128-five-groups"])
@pytest.mark.parametrize("heads,cache,new", [
    pytest.param(16, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], id="H16-q1"),
    pytest.param(128, [2000, 127, 5, 700], [1, 2, 1, 3], id="H128-mtp"),
    pytest.param(128, [(37 * i) % 700 for i in range(20)], [1 + i % 2 for i in range(20)], id="H128-B20-mtp"),
])
@pytest.mark.parametrize("q_kind", ["bf16", "fp8"])
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 100)], ids=["causal", "swa100"])
def test_gpu_fp8_cache_deepseek_shapes(fp8_features, granularity, heads, cache, new, q_kind, mask, window):
    pb, q = batch(cache, new, heads=heads, head_size=576, page_size=64, dtype=torch.bfloat16, seed=89,
                  device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, granularity)
    if q_kind == "fp8":
        q_in, q_scale, q32 = fp8_q(q)
    else:
        q_in, q_scale, q32 = q, None, q.float()
    got, lse = run_fp8(pb, kv, q_in, q_scale=q_scale, mask=mask, window=window, rope=64)
    want, want_lse = fp8_reference(pb, kv, q32, mask=mask, window=window, rope=64)
    low, low_lse = fp8_lowprec(pb, kv, q32, torch.bfloat16, mask=mask, window=window, rope=64)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,cache,new", [
    pytest.param(16, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], id="H16-q1"),
    pytest.param(128, [2000, 127, 5, 700], [1, 2, 1, 3], id="H128-mtp"),
])
@pytest.mark.parametrize("q_kind", ["bf16", "fp8"])
def test_gpu_fp8_rope_aware_deepseek_shapes(fp8_features, heads, cache, new, q_kind):
    """The 640-byte rope-aware row (512 e4m3 latent bytes, 64 bf16 rope values) at 576 logical columns."""
    pb, q = batch(cache, new, heads=heads, head_size=576, page_size=64, dtype=torch.bfloat16, seed=97,
                  device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    if q_kind == "fp8":
        q_in, q_scale, q32 = fp8_q_rope_aware(q, rope=64)
    else:
        q_in, q_scale, q32 = q, None, q.float()
    got, lse = run_fp8(pb, kv, q_in, q_scale=q_scale, rope=64)
    want, want_lse = fp8_reference(pb, kv, q32, rope=64)
    low, low_lse = fp8_lowprec(pb, kv, q32, torch.bfloat16, rope=64)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


def run_launcher(pb, kv, q, cfg, *, parts=2, rope=ROPE, mask="causal", window=-1, combine=None, sink=None):
    """`launch_decode` with an explicit launch config (what the heuristic would not pick for these shapes)."""
    rope_aware = kv.params.per_token_scale_rope_aware
    latent = kv.params.head_size - (2 if rope_aware else 1) * rope
    plan = pm.mla_decode_plan(pb.input_row_offsets, kv, num_heads=q.shape[1], num_partitions=parts,
                              backend="triton")
    out = torch.full((q.shape[0], q.shape[1], latent), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((q.shape[0], q.shape[1]), float("nan"), device=q.device)
    _triton_decode.launch_decode(q, pb.input_row_offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, 1, SCALE,
                                 pm.MASKS[mask], window, out, lse, plan.schedule,
                                 max_seq_length=int(pb.input_row_offsets.diff().max()), qk_rope_head_dim=rope,
                                 scales=kv.scales, quant_granularity=kv.params.quantization_granularity or 0,
                                 rope_aware=rope_aware, config=cfg, combine_config=combine, attn_sink=sink)
    return out, lse


@cpu_tier
@pytest.mark.parametrize("combine", [CombineConfig(2, 4, 32, 1), CombineConfig(1, 16, 16, 1),
                                     CombineConfig(8, 1, 32, 1), CombineConfig(4, 2, 16, 2),
                                     CombineConfig(2, 2, 16, 1, block_t=1), CombineConfig(8, 1, 32, 1, block_t=2)],
                         ids=["p2-r4", "p1-r16", "p8-r1", "p4-r2", "p2+1-r2", "p8+2-r1"])
@pytest.mark.parametrize("parts", [3, 11])
def test_combine_tiles(combine, parts):
    """The combine's tiles (pieces per step, with a second tile of pieces or not, rows, columns) merge split
    sequences the same way: plans of `parts` workers (3 leaves every sequence whole; 11 splits two of them into
    2 and 3 pieces), an empty sequence, rows past a tile's end (6 rows of 4 heads). Many pieces and several
    steps: `test_combine_merges_both_tiles_of_pieces`."""
    pb, q = batch([40, 0, 23, 60], [2, 1, 1, 1], page_size=16, seed=103)
    cfg = DecodeConfig(block_m=16, block_n=16, num_warps=1, num_stages=1)
    got, lse = run_launcher(pb, pb.kv, q, cfg, parts=parts, combine=combine)
    check_fp32(got, lse, *reference(pb, q))


@cpu_tier
@pytest.mark.parametrize("block_p,block_t,block_r", [(4, 2, 1), (2, 1, 2), (8, 4, 4), (1, 1, 1), (16, 2, 2),
                                                     (32, 0, 2)])
def test_combine_merges_both_tiles_of_pieces(block_p, block_t, block_r):
    """`_mla_decode_combine_kernel` on hand-made partials, against a float64 merge: sequences of 20 and 21
    pieces (several steps of block_p + block_t pieces, the last partly masked), piece 0 in its own slot, NaN in
    every slot and row no piece uses, rows with -inf LSE in some pieces or in all of them, and a row whose only
    finite pieces sit in a step's second tile with LSEs near 100 (exp overflows unless that tile's maximum
    joins the running one)."""
    gen = torch.Generator().manual_seed(7)
    workers, heads, cols = 40, 3, 16
    seqs = [(0, 19, 5), (19, 19, 39), (19, 39, 39), (39, 39, 79)]  # (first worker, last worker, piece 0's slot)
    tokens = [2, 1, 1, 2]
    offsets = torch.tensor([0] + list(itertools.accumulate(tokens)), dtype=torch.int32)
    rows_cap = max(tokens) * heads
    schedule = torch.zeros(1 + workers + len(seqs), 4, dtype=torch.int32)
    part_out = torch.full((2 * workers, rows_cap, cols), float("nan"))
    part_lse = torch.full((2 * workers, rows_cap), float("nan"))
    want = torch.zeros(int(offsets[-1]), heads, cols, dtype=torch.float64)
    want_lse = torch.zeros(int(offsets[-1]), heads, dtype=torch.float64)
    for b, (first, last, slot0) in enumerate(seqs):
        schedule[1 + workers + b, :3] = torch.tensor([first, last, slot0])
        rows = tokens[b] * heads
        slots = [slot0] + [2 * (first + k) for k in range(1, last - first + 1)]
        for k, slot in enumerate(slots):
            part_out[slot, :rows] = torch.randn(rows, cols, generator=gen)
            part_lse[slot, :rows] = torch.randn(rows, generator=gen) * 3
            if k % 3 == 2:
                part_lse[slot, 0] = float("-inf")
        if len(slots) > 1:
            part_lse[slots, 1] = float("-inf")  # a row no piece saw a key for
            tail = [k for k in range(len(slots)) if k % (block_p + block_t) >= block_p]
            for k in range(len(slots)):  # row 2: finite only in second tiles (or nowhere without one)
                part_lse[slots[k], 2] = 100.0 + k if k in tail else float("-inf")
        lse = part_lse[slots, :rows].double()
        top = lse.max(0).values
        top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        weight = torch.exp(lse - top)
        total = weight.sum(0)
        merged = (weight[:, :, None] * part_out[slots, :rows].double().nan_to_num()).sum(0)
        merged = merged / torch.where(total > 0, total, torch.ones_like(total))[:, None]
        r0 = int(offsets[b])
        want[r0:r0 + tokens[b]] = merged.view(tokens[b], heads, cols)
        want_lse[r0:r0 + tokens[b]] = torch.where(total > 0, top + torch.log(total),
                                                  torch.full_like(total, float("-inf"))).view(tokens[b], heads)
    out = torch.full((int(offsets[-1]), heads, cols), float("nan"))
    lse = torch.full((int(offsets[-1]), heads), float("nan"))
    mla_decode._mla_decode_combine_kernel[(len(seqs), triton.cdiv(rows_cap, block_r), 1)](
        out, lse, offsets, schedule, lse, part_out, part_lse, len(seqs), heads, workers, out.stride(0),
        out.stride(1), lse.stride(0), lse.stride(1), part_out.stride(0), part_out.stride(1), part_lse.stride(0),
        BLOCK_R=block_r, BLOCK_DV=cols, BLOCK_P=block_p, HAS_SINK=False, PDL=False, BLOCK_T=block_t)
    for b in (0, 2):  # the split sequences (the others are the decode kernel's to write)
        r0, r1 = int(offsets[b]), int(offsets[b + 1])
        assert_close(out[r0:r1].double(), want[r0:r1], atol=1e-5, rtol=1e-5)
        assert_close(lse[r0:r1].double(), want_lse[r0:r1], atol=1e-5, rtol=1e-5, name="lse")


def test_heuristic_unmasked_interior():
    """The unmasked interior loop on every bf16 tile (faster or equal at every batch once empty masked loops
    are skipped); never for FP8 (within 1% either way)."""
    from pagedmla.configs.decode import heuristic
    bf16 = dict(kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16, cache_dtype=torch.bfloat16)
    assert heuristic(num_heads=128, max_q=1, batch=1, **bf16).unmasked_interior
    assert heuristic(num_heads=16, max_q=1, batch=64, **bf16).unmasked_interior
    assert heuristic(num_heads=16, max_q=1, batch=16, **bf16).unmasked_interior
    assert heuristic(num_heads=8, max_q=4, batch=1, **bf16).unmasked_interior
    fp8 = dict(bf16, cache_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    assert not heuristic(num_heads=128, max_q=1, batch=64, **fp8).unmasked_interior
    assert not heuristic(num_heads=16, max_q=1, batch=64, **fp8).unmasked_interior


def test_two_programs_per_sm_heuristics():
    """Rope-aware FP8 caches at 16-row tiles schedule two programs per SM from 2^19 batch keys on (B128 N4096:
    256 workers on 132 SMs, whole pieces of 2 per sequence), and the launcher then picks the 4-warp tile that
    fits twice in an SM; other caches, 64-row tiles, FP8 q and tile scales keep one program per SM's tiles."""
    from pagedmla.configs.decode import TWO_PER_SM_MIN_KEYS, heuristic, plan_heuristic, programs_per_sm
    assert programs_per_sm(num_heads=16, max_q=1, batch=128, max_keys=4096, rope_aware_fp8=True) == 2
    assert programs_per_sm(num_heads=16, max_q=1, batch=64, max_keys=4096, rope_aware_fp8=True) == 1
    assert programs_per_sm(num_heads=16, max_q=1, batch=1, max_keys=TWO_PER_SM_MIN_KEYS, rope_aware_fp8=True) == 2
    assert programs_per_sm(num_heads=16, max_q=1, batch=128, max_keys=4096, rope_aware_fp8=False) == 1
    assert programs_per_sm(num_heads=16, max_q=2, batch=128, max_keys=4096, rope_aware_fp8=True) == 1
    assert programs_per_sm(num_heads=128, max_q=1, batch=128, max_keys=4096, rope_aware_fp8=True) == 1
    plan = dict(num_heads=16, max_q=1, max_keys=4096, num_sms=132)
    assert plan_heuristic(batch=128, programs_per_sm=2, **plan).num_workers == 256
    assert plan_heuristic(batch=128, **plan).num_workers == 128
    assert plan_heuristic(batch=32, programs_per_sm=2, **dict(plan, max_keys=32768)).num_workers == 256
    fp8 = dict(num_heads=16, max_q=1, kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16,
               cache_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    two = heuristic(programs_per_sm=2, **fp8)
    assert (two.block_n, two.num_warps, two.num_stages, two.prefetch_table) == (32, 4, 4, True)
    assert heuristic(**fp8).num_warps == 8
    assert heuristic(programs_per_sm=2, **dict(fp8, q_dtype=torch.float8_e4m3fn)).num_warps == 8
    assert heuristic(programs_per_sm=2, tile_scales=True, **fp8).num_warps == 8
    assert heuristic(programs_per_sm=2, **dict(fp8, num_heads=128)).block_m == 64
    # the launcher: more programs than SMs (4 off CUDA) and the rope-aware cache, on the GPU only
    from pagedmla.ops._triton_decode import launch_programs_per_sm
    cpu = torch.device("cpu")
    assert launch_programs_per_sm(rope_aware=True, num_workers=5, tiles=1, device=cpu, interpret=False) == 2
    assert launch_programs_per_sm(rope_aware=True, num_workers=2, tiles=2, device=cpu, interpret=False) == 1
    assert launch_programs_per_sm(rope_aware=False, num_workers=5, tiles=1, device=cpu, interpret=False) == 1
    assert launch_programs_per_sm(rope_aware=True, num_workers=5, tiles=1, device=cpu, interpret=True) == 1


def test_combine_heuristic_tiles():
    """Few pieces per sequence: 2 pieces per step over whole rows; many (B = 1): all pieces in one step, up to
    256, one row of 32 columns, warps for about 2048 in the grid and at most 128 values per thread; a count just
    past a power of two (up to 128) as that power plus a small second tile."""
    few = combine_heuristic(num_workers=128, batch=64, kv_lora_rank=512)
    assert (few.block_p, few.block_r, few.block_dv, few.num_warps, few.block_t) == (2, 4, 512, 4, 0)
    h128 = combine_heuristic(num_workers=66, batch=1, kv_lora_rank=512, rows=128)  # 67 pieces
    assert (h128.block_p, h128.block_t, h128.block_r, h128.block_dv, h128.num_warps) == (64, 4, 1, 32, 1)
    h16 = combine_heuristic(num_workers=129, batch=1, kv_lora_rank=512, rows=16)
    assert (h16.block_p, h16.block_r, h16.block_dv, h16.num_warps, h16.block_t) == (256, 1, 32, 4, 0)
    h128_short = combine_heuristic(num_workers=33, batch=1, kv_lora_rank=512, rows=128)  # 34 pieces
    assert (h128_short.block_p, h128_short.block_t) == (32, 2)
    assert combine_heuristic(num_workers=48, batch=1, kv_lora_rank=512, rows=128).block_p == 64  # 49: no tail
    assert combine_heuristic(num_workers=600, batch=1, kv_lora_rank=512, rows=128).block_p == 256
    for workers, rows in ((600, 128), (300, 1), (66, 1), (129, 16), (33, 128)):
        cfg = combine_heuristic(num_workers=workers, batch=1, kv_lora_rank=512, rows=rows)
        lanes = cfg.block_p + cfg.block_t
        assert lanes >= min(256, workers + 1) and lanes * cfg.block_r * cfg.block_dv <= 128 * 32 * cfg.num_warps
    assert combine_heuristic(num_workers=6, batch=1, kv_lora_rank=256).block_dv == 256


def test_combine_grid_fits_cuda_limits():
    """Row blocks past the grid's y limit (65535) take more rows per program and fewer pieces per step (as
    many values per thread); columns are clipped to the latent width; calls that fit keep their tile."""
    cfg = combine_heuristic(num_workers=16, batch=1, kv_lora_rank=512, rows=66560)
    fit = fit_combine_grid(cfg, max_rows=66560, kv_lora_rank=512)
    assert -(-66560 // fit.block_r) <= MAX_GRID_Y and fit.block_r == 2 * cfg.block_r
    assert fit.block_p * fit.block_r == cfg.block_p * cfg.block_r and fit.block_dv == cfg.block_dv
    few = CombineConfig(block_p=2, block_r=4, block_dv=512, num_warps=4)
    tall = fit_combine_grid(few, max_rows=1_000_000, kv_lora_rank=512)
    assert -(-1_000_000 // tall.block_r) <= MAX_GRID_Y and tall.block_p == 1
    assert fit_combine_grid(few, max_rows=4096, kv_lora_rank=64) == dataclasses.replace(few, block_dv=64)


@cpu_tier
@pytest.mark.parametrize("cache_kind", ["fp32", "fp8-G16", "fp8-rope-aware"])
@pytest.mark.parametrize("block_m,parts", [(16, 2), (32, 1)])
@pytest.mark.parametrize("prefetch,interior", [(False, True), (True, True), (False, False)],
                         ids=["no-prefetch", "prefetch", "all-masked"])
def test_launch_variants(cache_kind, block_m, parts, prefetch, interior):
    """Explicit launch configs on float32 and FP8 caches, with and without the table entries loaded a block
    ahead (page size 16 = block_n: the prefetch is active; a window of 33 keys makes workers cross blocks):
    the same answers as the reference."""
    pb, q = batch([7, 0, 23, 40], [2, 1, 3, 1], page_size=16, seed=101)
    if cache_kind == "fp32":
        kv = pb.kv
    elif cache_kind == "fp8-G16":
        kv = pm.quantize_kv_cache(pb.kv, 16)
    else:
        kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=ROPE)
    cfg = DecodeConfig(block_m=block_m, block_n=16, num_warps=1, num_stages=1, prefetch_table=prefetch,
                       unmasked_interior=interior)
    got, lse = run_launcher(pb, kv, q, cfg, parts=parts, mask="sliding_window_causal", window=33)
    want = (reference(pb, q, "sliding_window_causal", 33) if cache_kind == "fp32"
            else fp8_reference(pb, kv, q, mask="sliding_window_causal", window=33))
    check_fp32(got, lse, *want)


@cpu_tier
@pytest.mark.parametrize("cache_kind,interior", [("bf16", True), ("bf16", False), ("fp8-G8", False),
                                                 ("fp8-rope-aware", False)])
def test_launch_64_row_tiles(cache_kind, interior):
    """64-row tiles (the logits as MMAs that feed no other dot, p and alpha passed through
    `hide_from_dot_chain`) on bf16 and FP8 caches (scales inside the tile, one scale per row): two row tiles
    per sequence (24 heads x up to 3 tokens), sequences split across workers, an empty sequence."""
    dtype = torch.bfloat16 if cache_kind == "bf16" else torch.float32
    pb, q = batch([7, 0, 23, 40], [2, 1, 3, 1], heads=24, page_size=16, dtype=dtype, seed=109)
    cfg = DecodeConfig(block_m=64, block_n=16, num_warps=1, num_stages=1, unmasked_interior=interior)
    if cache_kind == "bf16":
        got, lse = run_launcher(pb, pb.kv, q, cfg, parts=3)
        want, want_lse = reference(pb, q)
        check_lowprec(pb, q, got, lse, want, want_lse)
        return
    kv = (pm.quantize_kv_cache(pb.kv, 8) if cache_kind == "fp8-G8"
          else pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=ROPE))
    got, lse = run_launcher(pb, kv, q, cfg, parts=3)
    check_fp32(got, lse, *fp8_reference(pb, kv, q))


@pytest.mark.gpu
@pytest.mark.parametrize("cache_kind", ["bf16", "fp8-rope-aware", "fp8-G128"])
@pytest.mark.parametrize("heads,block_m,block_n,warps,stages", [
    (16, 16, 32, 4, 3), (16, 16, 32, 4, 4), (16, 16, 32, 8, 5), (16, 16, 64, 8, 2), (128, 64, 32, 8, 3),
    (128, 64, 64, 8, 2),
], ids=["H16-n32w4", "H16-n32w4s4", "H16-n32s5", "H16-n64s2", "H128-n32s3", "H128-n64s2"])
@pytest.mark.parametrize("prefetch,page_size", [(False, 64), (True, 64), (True, 16)],
                         ids=["no-prefetch", "prefetch", "prefetch-ps16"])
def test_gpu_launch_variants(cache_kind, heads, block_m, block_n, warps, stages, prefetch, page_size):
    """The launch configs the probes time, at DeepSeek shapes, against the float32 reference (page size 16 is
    below block_n: there the table prefetch is a no-op, the per-key table loads run)."""
    pb, q = batch([1000, 0, 63, 4000, 129, 700], [1, 1, 1, 2, 1, 1], heads=heads, head_size=576,
                  page_size=page_size, dtype=torch.bfloat16, seed=103, device="cuda")
    if cache_kind == "bf16":
        kv = pb.kv
    elif cache_kind == "fp8-G128":
        kv = pm.quantize_kv_cache(pb.kv, 128)
    else:
        kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    cfg = DecodeConfig(block_m=block_m, block_n=block_n, num_warps=warps, num_stages=stages,
                       prefetch_table=prefetch)
    got, lse = run_launcher(pb, kv, q, cfg, parts=7, rope=64)
    q32 = q.float()
    if cache_kind == "bf16":
        want, want_lse = reference(pb, q, rope=64)
        check_lowprec(pb, q, got, lse, want, want_lse, rope=64)
        return
    want, want_lse = fp8_reference(pb, kv, q32, rope=64)
    low, low_lse = fp8_lowprec(pb, kv, q32, torch.bfloat16, rope=64)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("q_kind", ["bf16", "fp8"])
def test_gpu_fp8_two_programs_per_sm(q_kind, monkeypatch):
    """More workers than SMs (here asked for; the plan does it for big rope-aware FP8 batches) make the launcher
    pick the two-per-SM tile with a bf16 q (4 warps, 32 keys, 4 stages) and keep the 8-warp tile with an FP8 q:
    against the float32 reference, on a batch with a sequence of one key, short and long ones (16-row tiles:
    one query token each); and a plan of a big batch has more workers than SMs when it does not expect the
    16-row warp-specialized kernel. (That kernel and the Gluon ring, which would take the bf16 q, are switched
    off, and so is the plan's expectation of the former: their own tests are below. With it, a plan for this
    cache schedules one worker per SM: `test_gpu_ws16_plan`.)"""
    from pagedmla.ops import _triton_decode
    monkeypatch.setattr(_triton_decode, "decode_ring_ready", lambda *a, **k: False)
    monkeypatch.setattr(_triton_decode, "decode_ws16_ready", lambda *a, **k: False)
    monkeypatch.setattr(_triton_decode, "ws16_planned", lambda *a, **k: False)
    picked = []
    pick = _triton_decode.heuristic
    monkeypatch.setattr(_triton_decode, "heuristic", lambda **kw: picked.append(pick(**kw)) or picked[-1])
    pb, q = batch([3000, 1, 0, 4000, 129, 700], [1, 1, 1, 1, 1, 1], heads=16, head_size=576, page_size=64,
                  dtype=torch.bfloat16, seed=107, device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if q_kind == "fp8":
        q_in, q_scale, q32 = fp8_q_rope_aware(q, rope=64)
    else:
        q_in, q_scale, q32 = q, None, q.float()
    got, lse = run_fp8(pb, kv, q_in, q_scale=q_scale, parts=2 * sms + 5, rope=64)
    tile = picked[-1]
    assert (tile.block_m, tile.block_n, tile.num_warps) == ((16, 32, 4) if q_kind == "bf16" else (16, 64, 8))
    want, want_lse = fp8_reference(pb, kv, q32, rope=64)
    low, low_lse = fp8_lowprec(pb, kv, q32, torch.bfloat16, rope=64)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)
    offsets = torch.arange(129, dtype=torch.int32, device="cuda")
    lengths = torch.full((128,), 4095, dtype=torch.int32, device="cuda")
    # the plan reads lengths only: the cache's contents do not matter here
    blocks = torch.zeros(kv.params.block_shape(128 * 64), dtype=torch.float8_e4m3fn, device="cuda")
    table = torch.arange(128 * 64, dtype=torch.int32, device="cuda").view(128, 64)
    big = pm.PagedKVCacheCollection(blocks, lengths, table, kv.params, torch.ones(kv.params.scales_shape(128 * 64),
                                    device="cuda"), max_seq_length=1, max_cache_length=4096)
    assert pm.mla_decode_plan(offsets, big, num_heads=16, backend="triton").num_partitions > sms


@pytest.mark.gpu
def test_gpu_e4m3_to_bf16_is_exact_for_every_byte():
    """The decode kernels' inline-assembly e4m3 -> bf16 conversion against torch's, for all 254 non-NaN bytes
    (zeros, subnormals, normals, both signs), in every position of the packed group of four."""
    import triton
    import triton.language as tl

    from pagedmla.kernels.fp8 import _e4m3_to_bf16

    @triton.jit
    def convert(src, dst, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst + offs, _e4m3_to_bf16(tl.load(src + offs)))

    codes = torch.tensor([b for b in range(256) if b not in (0x7F, 0xFF)], dtype=torch.uint8)
    # each byte at each of the four positions of a packed group
    x = torch.stack([codes.roll(s) for s in range(4)], 1).flatten()
    x = torch.cat([x, x[: 1024 - x.numel()]]).cuda().view(FP8)
    out = torch.empty(1024, dtype=torch.bfloat16, device="cuda")
    convert[(1,)](x, out, BLOCK=1024)
    assert torch.equal(out.view(torch.int16), x.to(torch.bfloat16).view(torch.int16))


# ------------------------------------------------------------------- GPU tier: the warp-specialized kernel

WS_CASES = [
    pytest.param(128, 64, [1000, 0, 63, 4000, 129, 7], [1, 2, 1, 1, 4, 0], id="H128-ps64-mtp"),
    pytest.param(64, 128, [2000, 127, 5, 700], [1, 2, 1, 3], id="H64-ps128-mtp"),
    pytest.param(128, 64, [(37 * i) % 700 for i in range(20)], [1 + i % 2 for i in range(20)], id="H128-ps64-B20"),
    # heads that divide 64: a tile holds several tokens' heads (rows token * H + head), each row with its own mask
    pytest.param(16, 64, [1000, 0, 63, 4000, 129, 7], [1, 2, 1, 3, 4, 0], id="H16-ps64-mtp"),
    pytest.param(16, 128, [700, 2500, 90], [6, 1, 5], id="H16-ps128-two-tiles"),
    pytest.param(32, 64, [2000, 127, 5, 700], [1, 2, 1, 2], id="H32-ps64-mtp"),
    pytest.param(8, 64, [500, 60, 3000], [8, 3, 5], id="H8-ps64-q8"),
]


def run_ws(pb, q, *, mask="causal", window=-1, sink=None, parts=None):
    """The dense decode through `launch_decode` with the warp-specialized config (output pre-filled with NaN)."""
    heads = q.shape[1]
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=heads, num_partitions=parts, backend="triton")
    out = torch.full((q.shape[0], heads, 512), float("nan"), dtype=q.dtype, device=q.device)
    lse = torch.full((q.shape[0], heads), float("nan"), device=q.device)
    _triton_decode.launch_decode(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths, pb.kv.lookup_table, 1,
                                 SCALE, pm.MASKS[mask], max(window, 0), out, lse, plan.schedule,
                                 max_seq_length=max(pb.new_lengths), attn_sink=sink, qk_rope_head_dim=64,
                                 config=WARP_SPECIALIZED)
    return out, lse


@pytest.mark.gpu
@pytest.mark.parametrize("heads,page_size,cache,new", WS_CASES)
@pytest.mark.parametrize("mask,window", [("causal", -1), ("null", -1), ("sliding_window_causal", 100),
                                         ("sliding_window_noncausal", 37), ("chunked_causal", 50),
                                         ("chunked", 50)])
@pytest.mark.parametrize("parts", [None, 7, 300], ids=["plan", "W7", "W300"])
def test_gpu_warp_specialized(heads, page_size, cache, new, mask, window, parts, call_counter):
    """The Gluon kernel (every schedule: whole sequences, pieces, workers with empty ranges) against the
    reference, on caches with NaN in unused slots and huge ids past the used pages."""
    pb, q = batch(cache, new, heads=heads, head_size=576, page_size=page_size, dtype=torch.bfloat16, seed=61,
                  device="cuda")
    sink = torch.randn(heads, generator=torch.Generator().manual_seed(5)).cuda() if mask == "causal" else None
    launches = call_counter(_triton_decode, "_launch_ws")
    got, lse = run_ws(pb, q, mask=mask, window=window, sink=sink, parts=parts)
    assert launches[0] == 1
    want, want_lse = reference(pb, q, mask, window, sink, rope=64)
    check_lowprec(pb, q, got, lse, want, want_lse, mask=mask, window=window, sink=sink, rope=64)


@pytest.mark.gpu
def test_gpu_default_decode_takes_warp_specialized_kernel(call_counter):
    """At 128 heads with 64-slot pages the public decode runs the Gluon kernel (its launches are counted, so a
    dispatch regression that silently falls back to the Triton kernel fails here); at page size 16 it cannot."""
    launches = call_counter(_triton_decode, "_launch_ws")
    for page_size, launched_so_far in ((64, 1), (16, 1)):
        pb, q = batch([700, 64, 3], [1, 2, 1], heads=128, head_size=576, page_size=page_size, dtype=torch.bfloat16,
                      seed=67, device="cuda")
        got, lse = run_triton(pb, q, rope=64)
        assert launches[0] == launched_so_far
        want_out, want_lse = reference(pb, q, rope=64)
        check_lowprec(pb, q, got, lse, want_out, want_lse, rope=64)


# --------------------------------------------------- CPU tier: the warp-specialized kernel's dispatch rules

def test_warp_specialized_cache_rows_address_every_slot():
    """`_ws_cache_rows`: row `page * page_rows + layer_row0 + slot` of the 2-D view is that slot of that layer."""
    blocks = torch.randn(5, 1, 3, 64, 1, 576).to(torch.bfloat16)
    for layer in range(3):
        view, page_rows, layer_row0 = _triton_decode._ws_cache_rows(blocks, layer)
        for page, slot in ((0, 0), (4, 63), (2, 17)):
            assert torch.equal(view[page * page_rows + layer_row0 + slot], blocks[page, 0, layer, slot, 0])
    # a page stride that is not a whole number of rows cannot be addressed by row
    page_stride = 3 * 64 * 576 + 8
    storage = torch.zeros(5 * page_stride, dtype=torch.bfloat16)
    odd = storage.as_strided((5, 1, 3, 64, 1, 576), (page_stride, page_stride, 64 * 576, 576, 576, 1))
    assert _triton_decode._ws_cache_rows(odd, 0) is None
    assert _triton_decode._ws_cache_rows(storage[8:8 + blocks.numel()].view(blocks.shape), 0) is not None
    assert _triton_decode._ws_cache_rows(storage[1:1 + blocks.numel()].view(blocks.shape), 0) is None  # unaligned
    assert _triton_decode._ws_cache_rows(blocks.float(), 0) is None
    assert _triton_decode._ws_cache_rows(blocks[..., :512], 0) is not None
    assert _triton_decode._ws_cache_rows(blocks[:, :, :, :, :, ::2], 0) is None


def test_warp_specialized_q_rows():
    q = torch.randn(3, 128, 576).to(torch.bfloat16)
    rows = _triton_decode._ws_q_rows(q)
    assert torch.equal(rows[2 * 128 + 5], q[2, 5])
    assert _triton_decode._ws_q_rows(q.transpose(0, 1).contiguous().transpose(0, 1)) is None  # head-major
    assert _triton_decode._ws_q_rows(q.float()) is None


def test_warp_specialized_out_rows():
    """The output as TMA rows `[T * H, 512]` (the TMA-store epilogue), or None for layouts a TMA store cannot
    write: rows that are not token * H + head apart, a misaligned start, another dtype."""
    out = torch.randn(3, 128, 512).to(torch.bfloat16)
    rows = _triton_decode._ws_out_rows(out)
    assert rows.shape == (3 * 128, 512) and torch.equal(rows[2 * 128 + 5], out[2, 5])
    assert _triton_decode._ws_out_rows(out.transpose(0, 1).contiguous().transpose(0, 1)) is None  # head-major
    assert _triton_decode._ws_out_rows(out.float()) is None
    padded = torch.zeros(3, 128, 520, dtype=torch.bfloat16)[..., :512]  # 1040-byte rows: 16-byte multiples
    assert torch.equal(_triton_decode._ws_out_rows(padded)[128], padded[1, 0])
    flat = torch.zeros(3 * 128 * 512 + 1, dtype=torch.bfloat16)
    assert _triton_decode._ws_out_rows(flat[1:].view(3, 128, 512)) is None  # 2-byte aligned start


def test_warp_specialized_dispatch_rules(monkeypatch):
    """`decode_ws_ready` on a Hopper GPU (patched in, so the rules run here on CPU tensors): the Gluon kernel
    takes bf16 DeepSeek-dim calls with heads a multiple or a divisor of 64, page sizes multiples of 64 and
    TMA-readable tensors, nothing else; off Hopper, nothing. The heuristic picks it only when the launcher says it can run."""
    q = torch.randn(2, 128, 576).to(torch.bfloat16)
    blocks = torch.randn(4, 1, 2, 64, 1, 576).to(torch.bfloat16)
    out = torch.empty(2, 128, 512, dtype=torch.bfloat16)

    def ready(q=q, blocks=blocks, out=out, scales=None, q_scale=None, rope_aware=False):
        return _triton_decode.decode_ws_ready(q, blocks, out, scales, q_scale, rope_aware, 1)
    assert not ready()  # CPU tensors: not Hopper
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: True)
    assert ready() == _triton_decode._WS_AVAILABLE
    if not _triton_decode._WS_AVAILABLE:
        return
    assert ready(q=q[:, :64].contiguous(), out=out[:, :64])  # 64 heads
    assert not ready(q=q[:, :64])  # a head range of a wider q: its rows are not at one stride
    assert not ready(q=q[:, :96].contiguous(), out=out[:, :96])  # a tile would hold a token's heads partly
    assert ready(q=q[:, :16].contiguous(), out=out[:, :16])  # 16 heads: a tile holds 4 tokens' heads
    assert not ready(q=q[:, :24].contiguous(), out=out[:, :24])  # 24 does not divide 64
    assert not ready(blocks=torch.randn(16, 1, 2, 16, 1, 576).to(torch.bfloat16))  # 16-slot pages
    assert ready(blocks=torch.randn(2, 1, 2, 128, 1, 576).to(torch.bfloat16))  # 128-slot pages
    assert not ready(q=q.half(), blocks=blocks.half(), out=out.half())
    assert not ready(scales=torch.ones(4, 1, 2, 64, 1, 1))
    assert not ready(rope_aware=True)
    assert not ready(q=q.transpose(0, 1).contiguous().transpose(0, 1))  # head-major q
    assert not ready(q=torch.zeros(1, 1, 576, dtype=torch.bfloat16).expand(2, 128, 576))  # overlapping rows
    assert not ready(out=torch.empty(2, 128, 1024, dtype=torch.bfloat16)[..., ::2])  # strided output columns
    wide = torch.empty(2, 128, 640, dtype=torch.bfloat16)[..., :576]
    assert ready(q=wide)  # a 640-element head stride is still a fixed row stride
    common = dict(kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16, cache_dtype=torch.bfloat16, batch=64)
    assert heuristic(num_heads=128, max_q=1, warp_specialized=True, **common) == WARP_SPECIALIZED
    assert heuristic(num_heads=64, max_q=2, warp_specialized=True, **common) == WARP_SPECIALIZED
    assert not heuristic(num_heads=128, max_q=1, **common).warp_specialized
    # 16 heads: more than 16 rows (2 to 4 query tokens) go to the Gluon kernel's tiles of several tokens, one
    # token (16 rows) does not; 96 heads: a tile would hold part of a token's heads
    assert heuristic(num_heads=16, max_q=4, warp_specialized=True, **common) == WARP_SPECIALIZED
    assert heuristic(num_heads=16, max_q=2, warp_specialized=True, **common) == WARP_SPECIALIZED
    assert heuristic(num_heads=32, max_q=1, warp_specialized=True, **common) == WARP_SPECIALIZED
    assert not heuristic(num_heads=8, max_q=4, warp_specialized=True, **common).warp_specialized  # not timed
    assert not heuristic(num_heads=16, max_q=1, warp_specialized=True, **common).warp_specialized
    assert not heuristic(num_heads=16, max_q=4, **common).warp_specialized
    assert not heuristic(num_heads=96, max_q=1, warp_specialized=True, **common).warp_specialized


# ------------------------------------------------------------------- GPU tier: the ring kernel (<= 16 rows)

RING_CASES = [
    # heads, page size, cached / new tokens, cache ("bf16", "fp16", "fp8": the rope-aware row with a bf16 q)
    pytest.param(16, 64, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], "bf16", id="H16-ps64-q1"),
    pytest.param(8, 16, [700, 31, 3, 1500], [2, 1, 2, 2], "bf16", id="H8-ps16-mtp"),
    pytest.param(5, 1, [300, 2, 90], [3, 1, 0], "fp16", id="H5-ps1-mtp3-fp16"),
    pytest.param(16, 64, [(53 * i) % 900 for i in range(40)], [1] * 40, "bf16", id="H16-ps64-B40"),
    pytest.param(16, 64, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], "fp8", id="H16-ps64-rope-fp8"),
    pytest.param(7, 16, [600, 45, 2100], [2, 1, 2], "fp8", id="H7-ps16-mtp-rope-fp8"),
]


def run_ring_case(heads, page_size, cache, new, kind, *, mask="causal", window=-1, sink=False, parts=None,
                  config=None, seed=0):
    """A dense decode of up to 16 rows per sequence through the public op (or `launch_decode` with `config`) on
    the GPU, against the float32 reference: caches with NaN in unused slots and huge ids past the used pages,
    outputs pre-filled with NaN."""
    dtype = torch.float16 if kind == "fp16" else torch.bfloat16
    pb, q = batch(cache, new, heads=heads, head_size=576, page_size=page_size, dtype=dtype, seed=seed,
                  device="cuda")
    sink_t = torch.randn(heads, generator=torch.Generator().manual_seed(seed + 5)).cuda() if sink else None
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64) if kind == "fp8" else pb.kv
    if config is not None:
        got, lse = run_launcher(pb, kv, q, config, parts=parts, rope=64, mask=mask, window=max(window, 0),
                                sink=sink_t)
    elif kind == "fp8":
        got, lse = run_fp8(pb, kv, q, mask=mask, window=window, sink=sink_t, parts=parts, rope=64)
    else:
        got, lse = run_triton(pb, q, mask=mask, window=window, sink=sink_t, parts=parts, rope=64)
    if kind == "fp8":
        want, want_lse = fp8_reference(pb, kv, q.float(), mask=mask, window=window, sink=sink_t, rope=64)
        low, low_lse = fp8_lowprec(pb, kv, q.float(), torch.bfloat16, mask=mask, window=window, sink=sink_t,
                                   rope=64)
        check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)
    else:
        want, want_lse = reference(pb, q, mask, window, sink_t, rope=64)
        check_lowprec(pb, q, got, lse, want, want_lse, mask=mask, window=window, sink=sink_t, rope=64)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,page_size,cache,new,kind", RING_CASES)
@pytest.mark.parametrize("mask,window", [("causal", -1), ("null", -1), ("sliding_window_causal", 100),
                                         ("sliding_window_noncausal", 37), ("chunked_causal", 50)])
@pytest.mark.parametrize("parts", [None, 7, 300], ids=["plan", "W7", "W300"])
def test_gpu_ring(heads, page_size, cache, new, kind, mask, window, parts, call_counter):
    """The Gluon ring kernel (`launch_decode` with its config; launches counted) for up to 16 rows per
    sequence: every mask, a sink with the causal one, and every schedule (the plan's, few workers holding
    several sequences, more workers than key blocks: empty ranges)."""
    launches = call_counter(_triton_decode, "_launch_ring")
    run_ring_case(heads, page_size, cache, new, kind, mask=mask, window=window, sink=mask == "causal",
                  parts=parts, config=RING, seed=heads + page_size)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_gpu_ring_plan(kind, fp8_features, call_counter, monkeypatch):
    """The shipped chain on a batch made to count as big (`ring_worth_it` patched): the plan schedules two
    workers per SM in 32-key units, and the public decode runs the ring kernel on it (mixed lengths, sinks).
    Pages of 32 slots: with pages of 64 or a multiple the rope-aware FP8 cache plans and runs the 16-row
    warp-specialized kernel instead (`test_gpu_ws16_plan`)."""
    launches = call_counter(_triton_decode, "_launch_ring")
    monkeypatch.setattr(_triton_decode, "ring_worth_it", lambda **kw: True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pb, _ = batch([2500, 0, 63, 4000, 129, 700], [1] * 6, heads=16, head_size=576, page_size=32,
                  dtype=torch.bfloat16, seed=5, device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64) if kind == "fp8" else pb.kv
    plan = pm.mla_decode_plan(pb.input_row_offsets, kv, num_heads=16, backend="triton")
    assert plan.num_partitions > sms and plan.granularity == 32
    run_ring_case(16, 32, [2500, 0, 63, 4000, 129, 700], [1] * 6, kind, sink=True, seed=5)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bf16", "fp16"])
def test_gpu_ring_public_dispatch(kind, fp8_features, call_counter):
    """The public decode takes the ring kernel on schedules of two workers per SM (what a plan for a big batch
    builds) and the Triton kernel on fewer workers, with the same answers."""
    launches = call_counter(_triton_decode, "_launch_ring")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for parts, want in ((2 * sms, 1), (7, 1)):
        run_ring_case(16, 64, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], kind, parts=parts, seed=parts)
        assert launches[0] == want


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
@pytest.mark.parametrize("slots", [2, 3, 5])
def test_gpu_ring_depths(kind, slots, fp8_features, call_counter):
    """Every ring depth through `launch_decode` (pieces of split sequences and whole ones, a sequence of one
    key, one with no query token)."""
    launches = call_counter(_triton_decode, "_launch_ring")
    cfg = dataclasses.replace(RING, ring_slots=slots)
    run_ring_case(16, 64, [2500, 0, 800, 64, 9], [1, 1, 1, 0, 1], kind, sink=True, parts=9, config=cfg,
                  seed=slots)
    assert launches[0] == 1


@pytest.mark.gpu
def test_gpu_ring_cuda_graph_replay(call_counter):
    """A captured 16-head decode step on the ring kernel (plan, split pieces, combine) replays with new lengths,
    tables, cache contents and queries: two workers per SM, as a plan for a big batch schedules them (this batch
    alone would not take the ring)."""
    launches = call_counter(_triton_decode, "_launch_ring")
    steps = [([500, 31, 2000], [1, 1, 1]), ([900, 3, 64], [1, 1, 1]), ([0, 1500, 7], [1, 1, 1])]
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def captured():
        assert launches[0] == 2

    run_graph_replay(steps, 16, rows=3, max_q=1, seed=71, num_partitions=2 * sms, on_capture=captured)


# --------------------------------------------- GPU tier: the warp-specialized 16-row kernel (rope-aware FP8)

@pytest.fixture(params=["widen", "registers"])
def ws16_on(request, monkeypatch):
    """The 16-row kernels switched on (`_triton_decode.WS16_ENABLED`, their kill switch), each test run once
    with each of them forced (`_triton_decode.WS16_KERNEL`: `kernels.mla_decode_ws16` and
    `kernels.mla_decode_ws16_rs`)."""
    monkeypatch.setattr(_triton_decode, "WS16_ENABLED", True)
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", request.param)


WS16_CASES = [
    # heads, page size, cached / new tokens
    pytest.param(16, 64, [1000, 0, 63, 4000, 129], [1, 1, 1, 1, 1], id="H16-ps64-q1"),
    pytest.param(8, 128, [700, 31, 3, 1500], [2, 1, 2, 2], id="H8-ps128-mtp"),
    pytest.param(7, 64, [600, 45, 2100], [2, 1, 2], id="H7-ps64-mtp"),
    pytest.param(1, 64, [300, 2, 90, 5000], [3, 1, 0, 4], id="H1-ps64-mtp4"),
    pytest.param(16, 64, [(53 * i) % 900 for i in range(40)], [1] * 40, id="H16-ps64-B40"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("heads,page_size,cache,new", WS16_CASES)
@pytest.mark.parametrize("mask,window", [("causal", -1), ("null", -1), ("sliding_window_causal", 100),
                                         ("sliding_window_noncausal", 37), ("chunked_causal", 50)])
@pytest.mark.parametrize("parts", [None, 1, 2, 7, 300], ids=["plan", "W1", "W2", "W7", "W300"])
def test_gpu_ws16(heads, page_size, cache, new, mask, window, parts, call_counter, ws16_on):
    """The warp-specialized 16-row kernel over the rope-aware FP8 cache (`launch_decode` with its config;
    launches counted): every mask, a sink with the causal one, and every schedule (the plan's; one or two
    workers, whose pieces run past the loader's 32 table entries per load; few workers holding several
    sequences; more workers than key blocks: empty ranges)."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    run_ring_case(heads, page_size, cache, new, "fp8", mask=mask, window=window, sink=mask == "causal",
                  parts=parts, config=WS16, seed=heads + page_size)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("cache,registers", [([4095] * 64, True), ([1000, 0, 63, 4000, 129], False)],
                         ids=["B64-N4096-long", "short"])
def test_gpu_ws16_automatic_choice(cache, registers, monkeypatch):
    """Without `WS16_KERNEL`, the plan's `long_pieces` picks the 16-row FP8 kernel, end to end through the public
    op: B64 N4096 at 16 heads (long pieces on the H200's 132 SMs) runs the register-operand kernel, a short batch
    the widen one; each against the reference."""
    monkeypatch.setattr(_triton_decode, "WS16_ENABLED", True)
    monkeypatch.setattr(_triton_decode, "WS16_KERNEL", None)
    seen = []
    launch = _triton_decode._launch_ws16

    def recorded(*args):
        seen.append(args[-1])  # `registers`
        return launch(*args)
    monkeypatch.setattr(_triton_decode, "_launch_ws16", recorded)
    run_ring_case(16, 64, cache, [1] * len(cache), "fp8", sink=True, seed=3)
    assert seen == [registers]


@pytest.mark.gpu
def test_gpu_ws16_repeated(call_counter, ws16_on):
    """The schedules that showed the kernel's race (BENCHMARKS.md, twentieth session: one to seven workers over
    forty short sequences), three times each: without the widen warps' proxy fence, 5 of 24 such runs came out
    wrong in one sequence (ws16_stress.py)."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    cache = [(53 * i) % 900 for i in range(40)]
    for _ in range(3):
        for parts in (1, 2, 7):
            run_ring_case(16, 64, cache, [1] * 40, "fp8", sink=True, parts=parts, config=WS16, seed=80)
    assert launches[0] == 9


@pytest.mark.gpu
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 300)])
@pytest.mark.parametrize("parts", [None, 1, 7])
def test_gpu_ws16_zero_and_negative_scales(mask, window, parts, call_counter, ws16_on):
    """Keys whose scale is zero, tiny or negative inside the visible range: a whole sequence of zero scales (its
    latent is zero, its logits the rope's alone), zero blocks at a sequence's start and inside the sliding window,
    a sequence whose first 151 keys have zero scales, blocks of negated scales and keys of scale 1e-30. The other
    keys' scales are shrunk 20 times so that the zero-scale keys (rope-only logits) carry real weight. The
    register kernel takes its running maximum over s + log2 |scale| with the logarithm floored: a review found
    that without the floor, rows whose keys so far all had zero scales lost their weight (a numpy emulation of
    the consumers with these very edits gave LSE errors of 0.1 to 2 and -inf, against a bound of 0.064)."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    edits = [(0, range(3001), 0.05), (3, range(1501), 0.05), (4, range(201), 0.05),  # shrunk first
             (1, range(701), 0.0), (0, range(64, 128), 0.0), (0, range(2752, 2816), 0.0), (0, range(320, 384), -1.0),
             (0, range(2880, 2944), -1.0), (0, range(1000, 3001, 97), 1e-30), (3, range(64), 0.0),
             (3, range(1216, 1280), 0.0), (4, range(151), 0.0)]
    run_ws16_rescaled([3000, 700, 64, 1500, 200], edits, mask, window, parts, seed=97)
    assert launches[0] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("mask,window", [("causal", -1), ("sliding_window_causal", 300)])
@pytest.mark.parametrize("parts", [None, 1, 7])
def test_gpu_ws16_rising_logits(mask, window, parts, call_counter, ws16_on):
    """Logits that rise from block to block: one key per 64-key block has its scale multiplied by 1 + j (j its
    block), so each row's maximum keeps climbing (by a few units of log2 per block, in some rows by far more).
    The kernel's softmax computes P against a running maximum that it updates only when a block's maximum rose
    more than `mla_decode_ws16.RESCALE_LOG2` above it; here both kinds of block come up many
    times in every sequence, in whole sequences and split ones."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    cache = [3000, 700, 64, 1500, 0]
    edits = [(b, [64 * j + (7 * j) % 64], 1 + j) for b, c in enumerate(cache) for j in range((c + 1) // 64 + 1)
             if 64 * j + (7 * j) % 64 < c + 1]
    run_ws16_rescaled(cache, edits, mask, window, parts, seed=91)
    assert launches[0] == 1


def run_ws16_rescaled(cache, edits, mask, window, parts, seed):
    """The 16-row FP8 decode (`launch_decode` with WS16) of 16 heads, one new token per sequence, over the
    rope-aware FP8 cache of `cache` keys with some keys' scales multiplied: `edits` holds (sequence, keys,
    factor); against the reference's math with the kernel's roundings."""
    pb, q = batch(cache, [1] * len(cache), heads=16, head_size=576, page_size=64, dtype=torch.bfloat16, seed=seed,
                  device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    table = kv.lookup_table.tolist()
    for b, keys, factor in edits:
        for k in keys:
            kv.scales[table[b][k // 64], :, :, k % 64] *= factor
    got, lse = run_launcher(pb, kv, q, WS16, parts=parts, rope=64, mask=mask, window=max(window, 0))
    want, want_lse = fp8_reference(pb, kv, q.float(), mask=mask, window=window, rope=64)
    low, low_lse = fp8_lowprec(pb, kv, q.float(), torch.bfloat16, mask=mask, window=window, rope=64)
    check_fp8_lowprec(got, lse, want, want_lse, low, low_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("parts", [None, "two-per-sm", 7])
def test_gpu_ws16_plan(parts, call_counter, ws16_on):
    """The shipped chain on the rope-aware FP8 cache (bf16 q, 16 heads, one token): the plan schedules one
    worker per SM (at most) in 64-key units, and the public decode runs the 16-row warp-specialized kernel on
    it, and on other schedules too (mixed lengths, a sequence of one key, sinks)."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    cache = [2500, 0, 63, 4000, 129, 700]
    pb, _ = batch(cache, [1] * 6, heads=16, head_size=576, page_size=64, dtype=torch.bfloat16, seed=5,
                  device="cuda")
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    if parts is None:
        plan = pm.mla_decode_plan(pb.input_row_offsets, kv, num_heads=16, backend="triton")
        assert plan.num_partitions <= sms and plan.granularity == 64
    run_ring_case(16, 64, cache, [1] * 6, "fp8", sink=True, seed=5,
                  parts=2 * sms if parts == "two-per-sm" else parts)
    assert launches[0] == 1


@pytest.mark.gpu
def test_gpu_ws16_cuda_graph_replay(call_counter, ws16_on):
    """A captured 16-head decode step over the rope-aware FP8 cache on the 16-row warp-specialized kernel
    (plan, split pieces, combine) replays with new lengths, tables, cache contents (and scales) and queries,
    matching the reference each time; unused slots hold NaN, the table huge ids past the used pages."""
    launches = call_counter(_triton_decode, "_launch_ws16")
    steps = [([500, 31, 2000], [1, 1, 1]), ([900, 3, 64], [1, 1, 1]), ([0, 1500, 7], [1, 1, 1])]
    heads, rows = 16, 3
    first = make_paged_batch(*steps[0], head_size=576, page_size=64, dtype=torch.bfloat16, seed=71,
                             device="cuda", spare_blocks=80, spare_table_columns=40)
    kv = pm.quantize_kv_cache(first.kv, rope_aware=True, qk_rope_head_dim=64).replace(max_seq_length=1)
    static_q = torch.randn(rows, heads, 576, device="cuda").to(torch.bfloat16)
    out = torch.full((rows, heads, 512), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan = pm.mla_decode_plan(first.input_row_offsets, kv, num_heads=heads, backend="triton")
    call = {"mask": "causal", "output": out, "plan": plan, "return_lse": True, "backend": "triton",
            "per_token_scale_rope_aware": True}
    pm.mla_decode_kv_cache_ragged(static_q, first.input_row_offsets, kv, 1, SCALE, **call)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _, lse = pm.mla_decode_kv_cache_ragged(static_q, first.input_row_offsets, kv, 1, SCALE, **call)
    assert launches[0] == 2
    for i, (cache, new) in enumerate(steps):
        pb = make_paged_batch(cache, new, head_size=576, page_size=64, dtype=torch.bfloat16, seed=77 + i,
                              device="cuda", spare_blocks=80, spare_table_columns=40)
        step = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
        kv.blocks.view(torch.uint8).fill_(0x7F)  # e4m3 NaN
        kv.scales.fill_(float("nan"))
        kv.blocks[: step.blocks.shape[0]].copy_(step.blocks)
        kv.scales[: step.scales.shape[0]].copy_(step.scales)
        kv.lookup_table.fill_(2**30)
        kv.lookup_table[:, : step.lookup_table.shape[1]].copy_(step.lookup_table)
        kv.cache_lengths.copy_(step.cache_lengths)
        first.input_row_offsets.copy_(pb.input_row_offsets)
        static_q.copy_(torch.randn(rows, heads, 576, device="cuda").to(torch.bfloat16))
        pm.mla_decode_plan(first.input_row_offsets, kv, num_heads=heads, out=plan)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        pb_view = type(pb)(kv, first.input_row_offsets, list(cache), list(new))
        want, want_lse = fp8_reference(pb_view, kv, static_q.float(), rope=64)
        low, low_lse = fp8_lowprec(pb_view, kv, static_q.float(), torch.bfloat16, rope=64)
        check_fp8_lowprec(out, lse, want, want_lse, low, low_lse)
    assert launches[0] == 2


def test_ws16_dispatch_rules(monkeypatch):
    """`decode_ws16_ready` on a Hopper GPU (patched in; CPU tensors), never while the kernel is switched off
    (`WS16_ENABLED`), and switched on: a bf16 q (no q_scale) with the rope-aware
    FP8 row and float32 scales, DeepSeek's dims, at most 16 rows per sequence, pages a multiple of 64 slots,
    TMA-readable q and cache. The plan expects the kernel for the same caches and row counts, and the config
    heuristic takes it for 16-row tiles only, never in the interpreter."""
    monkeypatch.setattr(_triton_decode, "_WS_AVAILABLE", True)
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: True)
    q = torch.empty(3, 16, 576, dtype=torch.bfloat16)
    out = torch.empty(3, 16, 512, dtype=torch.bfloat16)
    fp8 = torch.empty(4, 1, 2, 64, 1, 640, dtype=torch.float8_e4m3fn)
    scales = torch.empty(4, 1, 2, 64, 1, 1)
    ready = _triton_decode.decode_ws16_ready
    # switched off (WS16_ENABLED): no call and no plan takes the kernel
    rope = KVCacheParams(1, 640, True, 64, 1, torch.float8_e4m3fn, quantization_granularity=640,
                         per_token_scale_rope_aware=True)
    monkeypatch.setattr(_triton_decode, "interpreter_enabled", lambda: False)
    monkeypatch.setattr(_triton_decode, "WS16_ENABLED", False)
    assert not ready(q, fp8, out, scales, None, True, 1, 1)
    assert not _triton_decode.ws16_planned(rope, num_heads=16, max_q=1, device=torch.device("cuda"))
    monkeypatch.setattr(_triton_decode, "WS16_ENABLED", True)
    assert ready(q, fp8, out, scales, None, True, 1, 1)
    assert _triton_decode.ws16_planned(rope, num_heads=16, max_q=1, device=torch.device("cuda"))
    q8, out8 = torch.empty(3, 8, 576, dtype=torch.bfloat16), torch.empty(3, 8, 512, dtype=torch.bfloat16)
    assert ready(q8, fp8, out8, scales, None, True, 1, 2)  # 8 heads x 2 tokens
    assert not ready(q8, fp8, out8, scales, None, True, 1, 3)  # 24 rows
    assert not ready(q[:, :8], fp8, out[:, :8], scales, None, True, 1, 1)  # q's heads not rows of one 2-D view
    assert not ready(q, fp8, out, scales, None, True, 1, 2)
    assert not ready(q, fp8, out, None, None, True, 1, 1)
    assert not ready(q, fp8, out, scales.double(), None, True, 1, 1)
    assert not ready(q, fp8, out, scales, torch.ones(3), True, 1, 1)  # an FP8 q's scale
    assert not ready(q.half(), fp8, out.half(), scales, None, True, 1, 1)
    assert not ready(q, fp8, out, scales, None, False, 1, 1)
    assert not ready(q, torch.empty(4, 1, 2, 32, 1, 640, dtype=torch.float8_e4m3fn), out, scales, None, True, 1, 1)
    padded = torch.empty(4, 1, 2, 64, 1, 648, dtype=torch.float8_e4m3fn)[..., :640]  # rows 648 bytes apart
    assert not ready(q, padded, out, scales, None, True, 1, 1)  # not whole TMA rows of 16-byte multiples
    assert not ready(q, torch.empty(4, 1, 2, 64, 1, 656, dtype=torch.float8_e4m3fn), out, scales, None, True, 1, 1)
    assert not ready(q, fp8, torch.empty(3, 16, 1024, dtype=torch.bfloat16)[..., ::2], scales, None, True, 1, 1)
    assert not ready(q[:, :, :320], fp8, out, scales, None, True, 1, 1)
    cuda = torch.device("cuda")
    assert not _triton_decode.ws16_planned(rope, num_heads=16, max_q=2, device=cuda)
    assert not _triton_decode.ws16_planned(KVCacheParams(1, 640, True, 32, 1, torch.float8_e4m3fn,
                                                         quantization_granularity=640,
                                                         per_token_scale_rope_aware=True),
                                           num_heads=16, max_q=1, device=cuda)
    assert not _triton_decode.ws16_planned(KVCacheParams(1, 576, True, 64, 1, torch.bfloat16), num_heads=16,
                                           max_q=1, device=cuda)
    cfg = _triton_decode.plan_config(batch=128, num_heads=16, max_q=1, max_keys=4096, device=torch.device("cpu"),
                                     rope_aware_fp8=True, ws16=True)
    assert cfg.num_workers <= 4 and cfg.granularity == 64  # the interpreter's and CPU's 4 "SMs"
    from pagedmla.configs.decode import WS16
    common = dict(kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn,
                  compute_dtype=torch.bfloat16)
    assert heuristic(num_heads=16, max_q=1, ws16=True, **common) == WS16
    assert heuristic(num_heads=16, max_q=1, ws16=True, ring=True, **common) == WS16
    assert heuristic(num_heads=16, max_q=2, ws16=True, **common) != WS16
    assert heuristic(num_heads=16, max_q=1, ws16=True, interpret=True, **common) != WS16
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: False)
    assert not ready(q, fp8, out, scales, None, True, 1, 1)
    assert not _triton_decode.ws16_planned(rope, num_heads=16, max_q=1, device=cuda)


def test_ws16_config_needs_a_call_it_can_take():
    """The ws16 config on a call the kernel cannot take (here: the interpreter, or a bf16 cache) is a
    ValueError naming it, not a launch."""
    pb, q = batch([40, 7], [1, 1], heads=4, page_size=16, seed=111)
    from pagedmla.configs.decode import WS16
    with pytest.raises(ValueError, match="ws16"):
        run_launcher(pb, pb.kv, q, WS16, parts=2)


# ------------------------------------------------------------- CPU tier: the ring kernel's dispatch rules

def test_ring_dispatch_rules(monkeypatch):
    """`decode_ring_ready` on a Hopper GPU (patched in; CPU tensors): 16-bit q and cache of one dtype without
    scales, or a bf16 q with the rope-aware FP8 row and its scales; 512 + 64 dims; at most 16 rows (heads x
    query tokens) per sequence; a cache whose strides are multiples of 32 bytes. The plan expects the ring for
    the same caches and row counts."""
    monkeypatch.setattr(_triton_decode, "_WS_AVAILABLE", True)
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: True)
    q = torch.empty(3, 16, 576, dtype=torch.bfloat16)
    blocks = torch.empty(4, 1, 2, 64, 1, 576, dtype=torch.bfloat16)
    out = torch.empty(3, 16, 512, dtype=torch.bfloat16)
    ready = _triton_decode.decode_ring_ready
    assert ready(q, blocks, out, None, None, False, 1)
    assert ready(q[:, :8], blocks, out[:, :8], None, None, False, 2)  # 8 heads x 2 tokens
    assert not ready(q[:, :8], blocks, out[:, :8], None, None, False, 3)  # 24 rows
    assert not ready(q, blocks, out, None, None, False, 2)
    assert ready(q.half(), blocks.half(), out.half(), None, None, False, 1)
    assert not ready(q.half(), blocks, out, None, None, False, 1)
    assert not ready(q.float(), blocks, out, None, None, False, 1)
    assert not ready(q, blocks, out, torch.empty(1), None, False, 1)
    assert not ready(q[..., :320], blocks[..., :320], out[..., :256], None, None, False, 1)
    padded = torch.empty(4, 1, 2, 64, 1, 584, dtype=torch.bfloat16)[..., :576]  # rows 1168 bytes apart
    assert not ready(q, padded, out, None, None, False, 1)
    fp8 = torch.empty(4, 1, 2, 64, 1, 640, dtype=torch.float8_e4m3fn)
    scales = torch.empty(4, 1, 2, 64, 1, 1)
    assert ready(q, fp8, out, scales, None, True, 1)
    assert not ready(q, fp8, out, None, None, True, 1)
    assert not ready(q.half(), fp8, out.half(), scales, None, True, 1)
    assert not ready(q, fp8, out, scales, torch.ones(3), True, 1)  # an FP8 q's scale
    monkeypatch.setattr(_triton_decode, "interpreter_enabled", lambda: False)
    cuda = torch.device("cuda")
    bf16 = KVCacheParams(1, 576, True, 64, 1, torch.bfloat16)
    big = dict(device=cuda, batch=128, max_keys=4096)
    assert _triton_decode.ring_planned(bf16, num_heads=16, max_q=1, **big)
    assert _triton_decode.ring_planned(bf16, num_heads=4, max_q=4, **big)
    assert not _triton_decode.ring_planned(bf16, num_heads=16, max_q=1, device=cuda, batch=16, max_keys=4096)
    assert not _triton_decode.ring_planned(bf16, num_heads=16, max_q=2, **big)
    assert not _triton_decode.ring_planned(KVCacheParams(1, 576, True, 64, 1, torch.float32), num_heads=16,
                                           max_q=1, **big)
    rope = KVCacheParams(1, 640, True, 64, 1, torch.float8_e4m3fn, quantization_granularity=640,
                         per_token_scale_rope_aware=True)
    assert _triton_decode.ring_planned(rope, num_heads=16, max_q=1, **big)
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: False)
    assert not ready(q, blocks, out, None, None, False, 1)
    assert not _triton_decode.ring_planned(bf16, num_heads=16, max_q=1, **big)


def test_ring_heuristics():
    """`ring=True` picks the ring config for tiles of up to 16 rows only (and never in the interpreter), and a
    plan that expects the ring schedules two workers per SM."""
    from pagedmla.configs.decode import RING, RING_SLOTS, plan_heuristic, programs_per_sm, ring_worth_it
    common = dict(kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16, cache_dtype=torch.bfloat16, batch=64)
    assert heuristic(num_heads=16, max_q=1, ring=True, **common) == RING
    assert (RING.block_m, RING.block_n, RING.num_warps, RING.ring_slots) == (16, 32, 4, RING_SLOTS)
    assert heuristic(num_heads=8, max_q=2, ring=True, **common) == RING
    assert heuristic(num_heads=16, max_q=2, ring=True, **common).ring_slots == 0
    assert heuristic(num_heads=16, max_q=1, **common).ring_slots == 0
    assert heuristic(num_heads=16, max_q=1, ring=True, interpret=True, **common).ring_slots == 0
    assert programs_per_sm(num_heads=16, max_q=1, batch=64, max_keys=4096, rope_aware_fp8=False, ring=True) == 2
    assert programs_per_sm(num_heads=16, max_q=2, batch=64, max_keys=4096, rope_aware_fp8=False, ring=True) == 1
    # plans take the ring from B64 N4096 on (2^18 batch keys)
    assert ring_worth_it(batch=64, max_keys=4096) and ring_worth_it(batch=16, max_keys=16384)
    assert not ring_worth_it(batch=32, max_keys=4096) and not ring_worth_it(batch=1, max_keys=16384)
    assert plan_heuristic(batch=64, num_heads=16, max_q=1, max_keys=4096, num_sms=132,
                          programs_per_sm=2).num_workers == 256


def test_ring_plan_granularity(monkeypatch):
    """A plan for the ring kernel (more workers than SMs: 4 off CUDA) cuts the keys in 32-key units, others
    keep the heuristic's; a refreshed plan keeps its units."""
    from pagedmla.configs.decode import RING_GRANULARITY
    monkeypatch.setattr(_triton_decode, "interpreter_enabled", lambda: False)
    cpu = torch.device("cpu")
    kw = dict(batch=2, num_heads=16, max_q=1, max_keys=4096, device=cpu)
    ring = _triton_decode.plan_config(num_partitions=8, ring=True, **kw)
    assert (ring.granularity, ring.fixed_cost, ring.tail_cost) == (RING_GRANULARITY, 0, 0) and RING_GRANULARITY == 32
    # fewer than two workers per sequence: the fixed cost per sequence stays
    fewer = _triton_decode.plan_config(num_partitions=8, ring=True, **dict(kw, batch=5))
    assert (fewer.granularity, fewer.fixed_cost, fewer.tail_cost) == (32, 2, 1)
    assert _triton_decode.plan_config(num_partitions=4, ring=True, **kw).granularity == 64
    assert _triton_decode.plan_config(num_partitions=8, **kw).granularity == 64
    pb = make_paged_batch([300, 40], [1, 1], head_size=HEAD, page_size=16, seed=3)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=8, backend="triton")
    assert plan.granularity == plan.schedule[0, 0].item() == 64
    # a plan the ring kernel would take (the CPU has no Hopper: patched in), then refreshed
    monkeypatch.setattr(_triton_decode, "ring_planned", lambda *a, **k: True)
    plan = pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, num_partitions=8, backend="triton")
    assert plan.granularity == plan.schedule[0, 0].item() == 32
    pm.mla_decode_plan(pb.input_row_offsets, pb.kv, num_heads=4, out=plan)
    assert plan.granularity == plan.schedule[0, 0].item() == 32


def test_ring_rejects_bad_configs(monkeypatch):
    """A ring config for a call the ring kernel cannot take, or a ring of one slot (or more than 8), is a
    ValueError, not a wrong answer."""
    pb, q = batch([40], [1], heads=16, head_size=576, page_size=16, dtype=torch.bfloat16, seed=1)
    out = torch.empty(1, 16, 512, dtype=torch.bfloat16)
    lse = torch.empty(1, 16)

    def launch(cfg):
        _triton_decode.launch_decode(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths,
                                     pb.kv.lookup_table, 0, 0.1, 1, 0, out, lse,
                                     torch.zeros(3, 4, dtype=torch.int32), max_seq_length=1, qk_rope_head_dim=64,
                                     config=cfg)
    monkeypatch.setattr(_triton_decode, "_WS_AVAILABLE", True)
    monkeypatch.setattr(_triton_decode, "is_hopper", lambda device: True)
    monkeypatch.setattr(_triton_decode, "interpreter_enabled", lambda: False)
    assert _triton_decode.decode_ring_ready(q, pb.kv.blocks, out, None, None, False, 1)
    # 16 heads x 2 query tokens: 32 rows per sequence
    with pytest.raises(ValueError, match="ring_slots 0 for a call"):
        _triton_decode.launch_decode(q, pb.input_row_offsets, pb.kv.blocks, pb.kv.cache_lengths,
                                     pb.kv.lookup_table, 0, 0.1, 1, 0, out, lse,
                                     torch.zeros(3, 4, dtype=torch.int32), max_seq_length=2, qk_rope_head_dim=64,
                                     config=RING)
    monkeypatch.setattr(_triton_decode, "decode_ring_ready", lambda *a, **k: True)
    for slots in (1, 9):
        with pytest.raises(ValueError, match="ring_slots 0 or 2 to 8"):
            launch(dataclasses.replace(RING, ring_slots=slots))


@triton.jit
def _cast_kernel(x_ptr, y_ptr, N: tl.constexpr, INTERPRET: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, _cast(tl.load(x_ptr + i), tl.bfloat16, INTERPRET))


def test_interpreter_bf16_cast_rounds_like_torch():
    """`fp8._cast`, which the kernels use for float32 -> bf16 (the interpreter's own conversion truncates), gives
    torch's round-to-nearest-even on ties, carries, subnormals, infinities and NaNs with any payload (one whose
    low bits are all set would carry into the sign and come out as -0 if it were rounded like a number)."""
    words = [0x3F800000, 0x3F800001, 0x3F808000, 0x3F818000, 0x3F80FFFF, 0x7F7FFFFF, 0x00000001, 0x807FFFFF,
             0x7F800000, 0xFF800000, 0x7FC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001]
    bits = torch.tensor(words, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    y = torch.empty(16, dtype=torch.bfloat16)
    _cast_kernel[(1,)](torch.cat([x, torch.zeros(2)]), y, N=16, INTERPRET=interpreter_enabled())
    got, want = y[:len(words)].float(), x.to(torch.bfloat16).float()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    finite = ~torch.isnan(want)
    assert torch.equal(got[finite], want[finite]) and torch.equal(got[finite].signbit(), want[finite].signbit())
