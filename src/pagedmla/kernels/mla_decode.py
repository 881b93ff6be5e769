"""MLA decode kernels: the split-KV scheduler, the dense attention kernel and the combine kernel.

Work decomposition. The rows of sequence b are its `n_b * H` (query token, head) pairs, flattened as
`i = s * H + h`; a program owns one tile of `BLOCK_M` consecutive rows, so every cache row it reads serves all
heads (and all query tokens) of the tile. Along the keys, the scheduler (`_mla_decode_plan_kernel`, once per
step) lays every sequence's key blocks end to end, each between the fixed costs of starting and finishing it, and
cuts the line into `num_workers` equal spans; worker w processes its span for every row tile (grid
`num_workers * num_tiles`).
A sequence that one worker covers whole is written straight to `out`; a piece of a split sequence goes to a
partial slot (`2w` for the worker's first sequence, `2w + 1` for its last) as a normalized output and its LSE,
and `_mla_decode_combine_kernel` merges the pieces by LSE.

Schedule (int32 `[1 + W + B, 4]`, written by the plan kernel, read by the others):
    row 0: granularity (keys per block), payload (the longest worker span), total cost, W
    row 1 + w: worker w: first sequence, its first key, last sequence, the key it stops before
        (last sequence == B: runs to the end of the batch)
    row 1 + W + b: sequence b: first worker, last worker, partial slot of the first worker, 0
        (workers -1 for a sequence without query tokens; the 0 is read by the main kernel as an opaque zero)

FP8 (behind the constexpr QUANT; the bf16/fp16/fp32 path compiles as before): e4m3 cache rows are copied to
shared memory as they are, converted in registers (`pagedmla.kernels.fp8`) with the scales of the same (block,
slot), in the scale modes of `pagedmla.kernels.mla_sparse_decode` (one scale per tile on the logits and P,
power-of-two groups through a `[BLOCK_N, NG, GS]` view, or one scale per element); an e4m3 q's row scale
multiplies the logits. The rope-aware row (e4m3 latent with one scale per row, then the rope part as bf16 bytes)
reads its rope columns through a bf16 view of the cache (and of an FP8 q).

Pipelining (`PREFETCH_TABLE`, the FP8 configs): the main loop loads each block's lookup-table entry one block
ahead (`_page_block`), so the key rows' addresses never wait on a load of the same iteration and
`num_stages - 1` blocks are in flight.

64-row tiles (8 warps, two warpgroups) compute the logits as MMAs that feed no other dot
(`pagedmla.kernels.common.split_logits`, `hide_from_dot_chain`): each warpgroup takes half of the block's keys.
Laid out as the head of a dot chain, both warpgroups computed all of them (H200, 128 heads, B64 N4096: 293 ->
254 us). 16- and 32-row tiles (`mma.sync`) keep the chained form, whose layout is already split by keys.

Softmax runs in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernels in natural log.
"""

import triton
import triton.language as tl

from .common import dot, gdc_launch_dependents, gdc_wait, hide_from_dot_chain, load_or_zero, split_logits, visible_range
from .fp8 import _dequant, _load_scales, _softmax_update

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _sequence_costs(offsets_ptr, cache_lengths_ptr, b, batch, granularity, fixed_cost):
    """Cost of sequences `b` (a block of indices): key blocks plus the fixed cost; 0 without query tokens."""
    ok = b < batch
    start = tl.load(offsets_ptr + b, mask=ok, other=0)
    count = tl.load(offsets_ptr + b + 1, mask=ok, other=0) - start
    keys = tl.load(cache_lengths_ptr + b, mask=ok, other=0) + count
    return tl.where(ok & (count > 0), (keys + granularity - 1) // granularity + fixed_cost, 0)


@triton.jit
def _floor_div(a, b):
    """`a // b` for int64 `0 <= a < 2^62` and a scalar `0 < b < 2^31`, the quotient below 2^31: a float64
    estimate (a times 1 / b, off by at most one at these sizes), corrected by the remainder. An int64 division
    is a long software routine on the GPU; the plan kernel's 69 of them took it to about 17 us (H200,
    torch.profiler)."""
    b64 = b + tl.zeros([], dtype=tl.int64)  # an int64 scalar, also when b arrives as a compile-time int
    q = (a.to(tl.float64) * (1.0 / b64.to(tl.float64))).to(tl.int64)
    r = a - q * b64
    q = tl.where(r < 0, q - 1, q)
    return tl.where(r >= b64, q + 1, q)


@triton.jit
def _span_start(w, total, num_workers):
    """First cost unit of worker w's span (`_mla_decode_plan_kernel`); int64 products: total * W can pass 2^31
    (a thousand sequences of a million keys, hundreds of workers)."""
    exact = _floor_div(w.to(tl.int64) * total.to(tl.int64), num_workers).to(tl.int32)
    return tl.where(total >= num_workers, exact, tl.minimum(w, total))


@triton.jit
def _worker_of(x, total, num_workers):
    """The worker whose span holds cost unit x (< total): the last w with `_span_start(w) <= x`."""
    exact = _floor_div((x + 1).to(tl.int64) * num_workers - 1, tl.maximum(total, 1)).to(tl.int32)
    return tl.where(total >= num_workers, exact, x)


# sizes are not specialized: a worker count of 1 would otherwise arrive as a constant (and a recompile would run
# whenever one becomes 1 or changes its divisibility by 16)
@triton.jit(do_not_specialize=["batch", "num_workers", "granularity", "fixed_cost", "tail_cost"])
def _mla_decode_plan_kernel(
    offsets_ptr, cache_lengths_ptr, schedule_ptr,
    batch, num_workers, granularity, fixed_cost, tail_cost,
    BLOCK_B: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """Program p fills the rows of workers `[p * BLOCK_W, (p + 1) * BLOCK_W)`; program 0 also fills the header
    and the sequence rows. Worker w owns the cost span `[floor(w * total / W), floor((w + 1) * total / W))`: when
    W is a multiple of the batch or the batch a multiple of W, equal sequences fall into whole pieces (spans of
    total / W rounded up, as before, drift off the sequences' edges when it is not an integer: 16 heads, B = 64,
    N = 4096 at 256 workers gave most workers pieces of two sequences and left the last ones idle). With fewer
    units than workers, worker w < total owns unit w and the others none: a span inside a split sequence is
    never empty (the combine reads a partial from every worker between its first and last). A sequence's span
    is `fixed_cost - tail_cost` units (loading q), its key blocks, then `tail_cost` units (writing its result): a
    sequence split in two gives each half as many blocks."""
    pid = tl.program_id(0)
    ob = tl.arange(0, BLOCK_B)
    head_cost = fixed_cost - tail_cost
    total = 0
    b0 = 0
    while b0 < batch:
        total += tl.sum(_sequence_costs(offsets_ptr, cache_lengths_ptr, b0 + ob, batch, granularity, fixed_cost), 0)
        b0 += BLOCK_B
    payload = tl.maximum((total + num_workers - 1) // num_workers, 1)

    w = pid * BLOCK_W + tl.arange(0, BLOCK_W)
    x_start = _span_start(w, total, num_workers)
    x_end = _span_start(w + 1, total, num_workers)
    # sequences that end at or before x, and their summed cost: the sequence holding x and where it starts
    n_start = tl.zeros([BLOCK_W], dtype=tl.int32)
    c_start = tl.zeros([BLOCK_W], dtype=tl.int32)
    n_end = tl.zeros([BLOCK_W], dtype=tl.int32)
    c_end = tl.zeros([BLOCK_W], dtype=tl.int32)
    carry = 0
    b0 = 0
    while b0 < batch:
        b = b0 + ob
        cost = _sequence_costs(offsets_ptr, cache_lengths_ptr, b, batch, granularity, fixed_cost)
        ends = tl.cumsum(cost, 0) + carry
        ok = b < batch
        done = ok[None, :] & (ends[None, :] <= x_start[:, None])
        n_start += tl.sum(done.to(tl.int32), 1)
        c_start += tl.sum(tl.where(done, cost[None, :], 0), 1)
        done = ok[None, :] & (ends[None, :] <= x_end[:, None])
        n_end += tl.sum(done.to(tl.int32), 1)
        c_end += tl.sum(tl.where(done, cost[None, :], 0), 1)
        if pid == 0:
            begins = ends - cost
            # the workers holding the sequence's first and last key blocks (the worker holding unit x is the
            # last w with floor(w * total / W) <= x, i.e. ((x + 1) * W - 1) // total)
            first = _worker_of(begins + head_cost, total, num_workers)
            last = _worker_of(ends - tail_cost - 1, total, num_workers)
            # the first worker's piece is its first sequence (slot 2w) only if its span starts inside b
            slot = 2 * first + (_span_start(first, total, num_workers) < begins).to(tl.int32)
            has = cost > 0
            row = schedule_ptr + (1 + num_workers + b) * 4
            tl.store(row, tl.where(has, first, -1), mask=ok)
            tl.store(row + 1, tl.where(has, last, -1), mask=ok)
            tl.store(row + 2, tl.where(has, slot, -1), mask=ok)
            tl.store(row + 3, tl.zeros_like(b), mask=ok)
        carry += tl.sum(cost, 0)
        b0 += BLOCK_B

    # a span that starts in a sequence's tail gets an empty piece of it (its first key past the last)
    start_block = tl.maximum(x_start - c_start - head_cost, 0)
    end_block = tl.maximum(x_end - c_end - head_cost, 0)
    w_ok = w < num_workers
    row = schedule_ptr + (1 + w) * 4
    tl.store(row, n_start, mask=w_ok)
    tl.store(row + 1, tl.where(n_start < batch, start_block * granularity, 0), mask=w_ok)
    tl.store(row + 2, n_end, mask=w_ok)
    tl.store(row + 3, tl.where(n_end < batch, end_block * granularity, 0), mask=w_ok)
    if pid == 0:
        head = tl.arange(0, 4)
        tl.store(schedule_ptr + head,
                 tl.where(head == 0, granularity, tl.where(head == 1, payload, tl.where(head == 2, total, num_workers))))


@triton.jit
def _page_block(lookup_row_ptr, k0, key_hi, page_size, BLOCK_IN_PAGE: tl.constexpr):
    """The table entry of the block of keys at k0 (0 past key_hi, or without BLOCK_IN_PAGE). With PREFETCH_TABLE
    the main loop loads it one block ahead: a row address that waits on a table load of the same iteration
    keeps the compiler from issuing the block's copies early (measured on H200: what the FP8 tiles need; the
    bf16 tiles are as fast or faster without it)."""
    if BLOCK_IN_PAGE:
        return tl.load(lookup_row_ptr + k0 // page_size, mask=k0 < key_hi, other=0)
    else:
        return 0


@triton.jit
def _table_entries(lookup_row_ptr, k0, key_hi, page_size, next_page_block, BLOCK_N: tl.constexpr,
                   BLOCK_IN_PAGE: tl.constexpr, PREFETCH_TABLE: tl.constexpr):
    """(the table entry of the block at k0, the one to carry to the next block). PREFETCH_TABLE: the carried
    entry, and the next block's loaded now; else loaded here, unmasked (k0 < key_hi <= N_b: a used page; the
    load the bf16 configs were measured with), and the carried value passes through."""
    if PREFETCH_TABLE:
        return next_page_block, _page_block(lookup_row_ptr, k0 + BLOCK_N, key_hi, page_size, BLOCK_IN_PAGE)
    else:
        return (tl.load(lookup_row_ptr + k0 // page_size) if BLOCK_IN_PAGE else 0), next_page_block


@triton.jit
def _attend_block(acc, m_i, l_i, q_nope, q_rope, qs, qs_rope, k0, key_hi, page_block, vis_lo, vis_hi,
                  blocks_ptr, scales_ptr, rope_ptr, lookup_row_ptr, layer_offset, s_layer_offset, r_layer_offset,
                  page_size, stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
                  KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_IN_PAGE: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr, QUANT: tl.constexpr,
                  G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
                  ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr, CD: tl.constexpr,
                  ROPE_AWARE: tl.constexpr, ROPE_OFF: tl.constexpr, SPLIT_QS: tl.constexpr,
                  MASKED: tl.constexpr):
    """One block of BLOCK_N keys starting at k0 (a multiple of BLOCK_N): online softmax update of
    (acc, m_i, l_i). BLOCK_IN_PAGE: page_size is a multiple of BLOCK_N, so the block is one run of rows.
    MASKED: the block may hold keys past key_hi or keys some row does not see (bounds on the loads, the rows'
    intervals on the logits); else every key of the block is below key_hi and visible to every row of the tile.

    QUANT (FP8 cache and/or FP8 q): operands in the compute dtype CD, the cache rows dequantized by their
    scales per the scale modes of `pagedmla.kernels.mla_sparse_decode`, and the logits multiplied by the
    per-row `qs` (qk_scale times q's scale) instead of `qk_scale`. ROPE_AWARE: the rope columns are bf16 values
    at `ROPE_OFF` of the rows of `rope_ptr` (the cache viewed as bf16); SPLIT_QS: the rope logits take
    `qs_rope` (an FP8 q's scale covers its latent part only)."""
    offs_n = k0 + tl.arange(0, BLOCK_N)
    # 64-row tiles: a finite runtime float for `split_logits` and `hide_from_dot_chain`
    opaque = page_size.to(tl.float32)
    # keys past the tile's interval are never loaded: the lookup table past a sequence's pages and the cache
    # slots past N_b hold garbage, and zeroed V lanes keep NaN out of the products
    k_ok = offs_n < key_hi
    row_mask = k_ok[:, None] if MASKED else None
    if BLOCK_IN_PAGE:
        # one table entry per block, `page_block` (loaded an iteration ahead by the caller), no per-key division
        block = page_block
        row = (block.to(tl.int64) * stride_blk_b + (k0 % page_size).to(tl.int64) * stride_blk_s + layer_offset
               + tl.arange(0, BLOCK_N).to(tl.int64) * stride_blk_s)
    else:
        block = tl.load(lookup_row_ptr + offs_n // page_size, mask=k_ok, other=0)
        row = block.to(tl.int64) * stride_blk_b + (offs_n % page_size).to(tl.int64) * stride_blk_s + layer_offset
    k_nope = load_or_zero(blocks_ptr + row[:, None] + tl.arange(0, KV_LORA_RANK)[None, :], row_mask)  # also V
    if QUANT:
        if ROPE_AWARE:
            if BLOCK_IN_PAGE:
                row_r = (block.to(tl.int64) * stride_r_b + (k0 % page_size).to(tl.int64) * stride_r_s
                         + r_layer_offset + tl.arange(0, BLOCK_N).to(tl.int64) * stride_r_s)
            else:
                row_r = (block.to(tl.int64) * stride_r_b + (offs_n % page_size).to(tl.int64) * stride_r_s
                         + r_layer_offset)
        else:
            row_r = row
        k_rope = load_or_zero(rope_ptr + row_r[:, None] + ROPE_OFF + tl.arange(0, ROPE_DIM)[None, :], row_mask)
        # the scales of the same rows (masked keys read scale 0: their zeroed values stay 0, never NaN)
        if BLOCK_IN_PAGE:
            slot = (k0 % page_size).to(tl.int64) + tl.arange(0, BLOCK_N).to(tl.int64)
        else:
            slot = (offs_n % page_size).to(tl.int64)
        srow = scales_ptr + block.to(tl.int64) * stride_s_b + s_layer_offset + slot * stride_s_s
        s_lat = _load_scales(srow, k_ok, 0, KV_LORA_RANK, G, LAT_MODE, LAT_NG, BLOCK_N)
        s_rope = _load_scales(srow, k_ok, KV_LORA_RANK, ROPE_DIM, G, ROPE_MODE, ROPE_NG, BLOCK_N)
        k_nope = _dequant(k_nope, s_lat, KV_LORA_RANK, LAT_MODE, LAT_NG, LAT_GS, BLOCK_N, CD, INTERPRET)
        k_rope = _dequant(k_rope, s_rope, ROPE_DIM, ROPE_MODE, ROPE_NG, ROPE_GS, BLOCK_N, CD, INTERPRET)
        zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if BLOCK_M >= 64:
            # no logits dot accumulates onto another (`split_logits`)
            zero = zero * opaque
        if LAT_MODE == 1 or ROPE_MODE == 1:
            # a tile with one scale per key row: raw values into the MMA, the scale onto the logits' columns
            s_l = dot(q_nope, tl.trans(k_nope), zero, INTERPRET, IEEE)
            if LAT_MODE == 1:
                s_l = s_l * s_lat[None, :]
            s_r = dot(q_rope, tl.trans(k_rope), zero, INTERPRET, IEEE)
            if ROPE_MODE == 1:
                s_r = s_r * s_rope[None, :]
            if SPLIT_QS:
                s = s_l * qs[:, None] + s_r * qs_rope[:, None]
            else:
                s = (s_l + s_r) * qs[:, None]
        elif BLOCK_M >= 64:
            s = split_logits(q_nope, k_nope, q_rope, k_rope, opaque, BLOCK_M, BLOCK_N, INTERPRET, IEEE)
            s = s * qs[:, None]
        else:
            s = dot(q_rope, tl.trans(k_rope), dot(q_nope, tl.trans(k_nope), zero, INTERPRET, IEEE), INTERPRET, IEEE)
            s = s * qs[:, None]
        if MASKED:
            vis = (offs_n[None, :] >= vis_lo[:, None]) & (offs_n[None, :] < vis_hi[:, None])
            s = tl.where(vis, s, float("-inf"))
        acc, m_new, l_i = _softmax_update(acc, m_i, l_i, s, k_nope, s_lat, opaque, LAT_MODE == 1, CD, INTERPRET,
                                          IEEE)
    else:
        k_rope = load_or_zero(blocks_ptr + row[:, None] + KV_LORA_RANK + tl.arange(0, ROPE_DIM)[None, :], row_mask)
        k_nope = k_nope.to(q_nope.dtype)
        k_rope = k_rope.to(q_nope.dtype)
        if BLOCK_M >= 64:
            # one warpgroup per half of the keys, not both on all of them (`split_logits`)
            s = split_logits(q_nope, k_nope, q_rope, k_rope, opaque, BLOCK_M, BLOCK_N, INTERPRET, IEEE)
        else:
            s = dot(q_nope, tl.trans(k_nope), tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32), INTERPRET, IEEE)
            s = dot(q_rope, tl.trans(k_rope), s, INTERPRET, IEEE)
        if MASKED:
            vis = (offs_n[None, :] >= vis_lo[:, None]) & (offs_n[None, :] < vis_hi[:, None])
            s = tl.where(vis, s * qk_scale, float("-inf"))
        else:
            s = s * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED:
            # rows that have seen no key yet keep m = -inf; shift them by 0 so exp2 gives 0, not NaN
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            # every row sees every key of the block: m_new is finite
            m_safe = m_new
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if BLOCK_M >= 64:
            p, alpha = hide_from_dot_chain(p, alpha, opaque)
        acc = dot(p.to(k_nope.dtype), k_nope, acc * alpha[:, None], INTERPRET, IEEE)
    return acc, m_new, l_i


@triton.jit
def _row_intervals(t, num_heads, num_q, num_keys, seg_lo, seg_hi, mask_code, window, BLOCK_M: tl.constexpr):
    """Visible keys [lo, hi) of the rows of tile t within the segment [seg_lo, seg_hi); rows past the tile's
    last (token, head) get the empty interval [num_keys, 0)."""
    offs_m = t * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < num_q * num_heads
    vis_lo, vis_hi = visible_range(num_keys - num_q + offs_m // num_heads, num_keys, mask_code, window)
    vis_lo = tl.where(m_ok, tl.maximum(vis_lo, seg_lo), num_keys)
    vis_hi = tl.where(m_ok, tl.minimum(vis_hi, seg_hi), 0)
    return vis_lo, vis_hi


@triton.jit
def _key_block(acc, m_i, l_i, k0, hi, next_page_block, q_nope, q_rope, qs, qs_rope, key_hi, vis_lo, vis_hi,
               blocks_ptr, scales_ptr, rope_ptr, lookup_row, layer_offset, s_layer_offset, r_layer_offset, page_size,
               stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
               KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_IN_PAGE: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr, QUANT: tl.constexpr,
               G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
               ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr, CD: tl.constexpr,
               ROPE_AWARE: tl.constexpr, ROPE_OFF: tl.constexpr, SPLIT_QS: tl.constexpr,
               PREFETCH_TABLE: tl.constexpr, MASKED: tl.constexpr):
    """One step of `_attend_range`'s loops (the interpreted and the compiled one): the block at k0's table entry,
    then `_attend_block`; returns the running state and the table entry carried to the next block."""
    page_block, next_page_block = _table_entries(lookup_row, k0, hi, page_size, next_page_block, BLOCK_N,
                                                 BLOCK_IN_PAGE, PREFETCH_TABLE)
    acc, m_i, l_i = _attend_block(
        acc, m_i, l_i, q_nope, q_rope, qs, qs_rope, k0, key_hi, page_block, vis_lo, vis_hi, blocks_ptr,
        scales_ptr, rope_ptr, lookup_row, layer_offset, s_layer_offset, r_layer_offset, page_size,
        stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
        KV_LORA_RANK, ROPE_DIM, BLOCK_M, BLOCK_N, BLOCK_IN_PAGE, INTERPRET, IEEE, QUANT, G, LAT_MODE,
        LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, CD, ROPE_AWARE, ROPE_OFF, SPLIT_QS, MASKED)
    return acc, m_i, l_i, next_page_block


@triton.jit
def _attend_range(acc, m_i, l_i, lo, hi, q_nope, q_rope, qs, qs_rope, key_hi, t, num_heads, num_q, num_keys, seg_lo,
                  seg_hi, mask_code, window, blocks_ptr,
                  scales_ptr, rope_ptr, lookup_row, layer_offset, s_layer_offset, r_layer_offset, page_size,
                  stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
                  KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_IN_PAGE: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr, QUANT: tl.constexpr,
                  G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
                  ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr, CD: tl.constexpr,
                  ROPE_AWARE: tl.constexpr, ROPE_OFF: tl.constexpr, SPLIT_QS: tl.constexpr,
                  PREFETCH_TABLE: tl.constexpr, MASKED: tl.constexpr):
    """The key blocks at lo, lo + BLOCK_N, ... below hi (`_attend_block`, MASKED or not). Compiled: a pipelined
    for loop; interpreted: a while loop (the interpreter takes no runtime bounds in range()). The rows' intervals
    are computed here, for masked ranges only, so that they hold no registers during the unmasked one. An empty
    masked range of a 16/32-row tile skips the loop whole: a pipelined loop's prologue still issues its
    (predicated-off) copies and waits for them."""
    # 64-row tiles keep unguarded loops: the guard cost their sm_90a hot loops spills, barriers and serialized
    # MMAs (scripts/compile_sm90.py); for them `run` stays a compile-time True
    run = True
    if MASKED and BLOCK_M < 64:
        run = lo < hi
    if run:
        if MASKED:
            vis_lo, vis_hi = _row_intervals(t, num_heads, num_q, num_keys, seg_lo, seg_hi, mask_code, window, BLOCK_M)
        else:
            vis_lo = 0
            vis_hi = 0
        next_page_block = _page_block(lookup_row, lo, hi, page_size, BLOCK_IN_PAGE and PREFETCH_TABLE)
        if INTERPRET:
            k0 = lo
            while k0 < hi:
                acc, m_i, l_i, next_page_block = _key_block(
                    acc, m_i, l_i, k0, hi, next_page_block, q_nope, q_rope, qs, qs_rope, key_hi, vis_lo, vis_hi,
                    blocks_ptr, scales_ptr, rope_ptr, lookup_row, layer_offset, s_layer_offset, r_layer_offset,
                    page_size, stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
                    KV_LORA_RANK, ROPE_DIM, BLOCK_M, BLOCK_N, BLOCK_IN_PAGE, INTERPRET, IEEE, QUANT, G, LAT_MODE,
                    LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, CD, ROPE_AWARE, ROPE_OFF, SPLIT_QS, PREFETCH_TABLE,
                    MASKED)
                k0 += BLOCK_N
        else:
            for k0 in range(lo, hi, BLOCK_N):
                acc, m_i, l_i, next_page_block = _key_block(
                    acc, m_i, l_i, k0, hi, next_page_block, q_nope, q_rope, qs, qs_rope, key_hi, vis_lo, vis_hi,
                    blocks_ptr, scales_ptr, rope_ptr, lookup_row, layer_offset, s_layer_offset, r_layer_offset,
                    page_size, stride_blk_b, stride_blk_s, stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale,
                    KV_LORA_RANK, ROPE_DIM, BLOCK_M, BLOCK_N, BLOCK_IN_PAGE, INTERPRET, IEEE, QUANT, G, LAT_MODE,
                    LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, CD, ROPE_AWARE, ROPE_OFF, SPLIT_QS, PREFETCH_TABLE,
                    MASKED)
    return acc, m_i, l_i


@triton.jit(do_not_specialize=["batch", "num_heads", "num_tiles", "layer_idx", "page_size", "mask_code", "window"])
def _mla_decode_kernel(
    q_ptr, out_ptr, lse_ptr, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, schedule_ptr, sink_ptr,
    part_out_ptr, part_lse_ptr, scales_ptr, q_scale_ptr, rope_ptr, q_rope_ptr,
    batch, num_heads, num_workers, num_tiles, layer_idx, page_size, mask_code, window, qk_scale,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_lt_b,
    stride_blk_b, stride_blk_l, stride_blk_s, stride_po_s, stride_po_r, stride_pl_s,
    stride_s_b, stride_s_l, stride_s_s, stride_r_b, stride_r_l, stride_r_s, stride_qr_t, stride_qr_h,
    KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    HAS_SINK: tl.constexpr, BLOCK_IN_PAGE: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
    QUANT: tl.constexpr, Q_SCALED: tl.constexpr, G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr,
    LAT_GS: tl.constexpr, ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr,
    CD: tl.constexpr, ROPE_AWARE: tl.constexpr, ROPE_OFF: tl.constexpr, Q_ROPE_OFF: tl.constexpr,
    SPLIT_QS: tl.constexpr, PREFETCH_TABLE: tl.constexpr, UNMASKED_INTERIOR: tl.constexpr, PDL: tl.constexpr,
):
    """Program (worker w, row tile t): the tile's rows against the keys of w's span, sequence by sequence.
    PDL (Hopper): launched as a programmatic dependent of the kernel before it, whose end it waits for before
    reading anything (see `mla_decode_ring` for why it does not let the combine launch early)."""
    pid = tl.program_id(0)
    if PDL:
        gdc_wait()
    w = pid // num_tiles
    t = pid % num_tiles
    sched = schedule_ptr + (1 + w) * 4
    first_seq = tl.load(sched)
    first_key = tl.load(sched + 1)
    last_seq = tl.load(sched + 2)
    stop_key = tl.load(sched + 3)
    offs_m = t * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, KV_LORA_RANK)
    offs_r = tl.arange(0, ROPE_DIM)
    layer_offset = layer_idx.to(tl.int64) * stride_blk_l
    s_layer_offset = layer_idx.to(tl.int64) * stride_s_l
    r_layer_offset = layer_idx.to(tl.int64) * stride_r_l

    b = first_seq
    while b <= tl.minimum(last_seq, batch - 1):
        row_start = tl.load(offsets_ptr + b)
        num_q = tl.load(offsets_ptr + b + 1) - row_start
        num_keys = tl.load(cache_lengths_ptr + b) + num_q
        seg_lo = tl.where(b == first_seq, first_key, 0)
        seg_hi = tl.where(b == last_seq, tl.minimum(stop_key, num_keys), num_keys)
        if (t * BLOCK_M < num_q * num_heads) & (seg_lo < seg_hi):
            m_ok = offs_m < num_q * num_heads
            tok = offs_m // num_heads
            head = offs_m % num_heads
            vis_lo, vis_hi = _row_intervals(t, num_heads, num_q, num_keys, seg_lo, seg_hi, mask_code, window,
                                            BLOCK_M)
            # the tile needs only the keys some row sees: skip whole blocks outside them (blocks start on
            # multiples of BLOCK_N; keys below a row's interval are real rows of b, masked out)
            key_lo = tl.min(vis_lo, 0)
            key_lo -= key_lo % BLOCK_N
            key_hi = tl.max(vis_hi, 0)

            # an opaque zero (column 3 of the sequence's schedule row) keeps the compiler from hoisting the
            # tile-sized address arithmetic of the stores out of the sequence loop, where it would hold registers
            zero = tl.load(schedule_ptr + (1 + num_workers + b) * 4 + 3)
            q_row = (row_start + tok).to(tl.int64) * stride_q_t + head.to(tl.int64) * stride_q_h
            q_nope = tl.load(q_ptr + q_row[:, None] + offs_d[None, :], mask=m_ok[:, None], other=0.0)
            if QUANT:
                # FP8 q converts exactly to CD; its row scale joins qk_scale on the logits (the rope-aware FP8
                # q: on the latent logits only, its rope part is bf16 at Q_ROPE_OFF of the row viewed as bf16)
                qr_row = (row_start + tok).to(tl.int64) * stride_qr_t + head.to(tl.int64) * stride_qr_h
                q_rope = tl.load(q_rope_ptr + qr_row[:, None] + Q_ROPE_OFF + offs_r[None, :], mask=m_ok[:, None],
                                 other=0.0)
                q_nope = q_nope.to(CD)
                q_rope = q_rope.to(CD)
                qs = tl.zeros([BLOCK_M], dtype=tl.float32) + qk_scale
                qs_rope = qs
                if Q_SCALED:
                    qs = qs * tl.load(q_scale_ptr + row_start + tok, mask=m_ok, other=0.0)
                    if not SPLIT_QS:
                        qs_rope = qs
            else:
                q_rope = tl.load(q_ptr + q_row[:, None] + KV_LORA_RANK + offs_r[None, :], mask=m_ok[:, None],
                                 other=0.0)
                qs = qk_scale
                qs_rope = qk_scale
                if IEEE:
                    q_nope = q_nope.to(tl.float32)
                    q_rope = q_rope.to(tl.float32)
            lookup_row = lookup_ptr + b.to(tl.int64) * stride_lt_b
            acc = tl.zeros([BLOCK_M, KV_LORA_RANK], dtype=tl.float32)
            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            # masked blocks [key_lo, a), blocks every row sees in full [a, z), masked blocks [z, key_hi): no
            # bounds or interval compares in the middle range (a and z sit on block edges counted from key_lo)
            if UNMASKED_INTERIOR:
                full_lo = tl.max(tl.where(m_ok, vis_lo, 0), 0)
                full_hi = tl.min(tl.where(m_ok, vis_hi, num_keys), 0)
                a = key_lo + tl.cdiv(tl.maximum(full_lo - key_lo, 0), BLOCK_N) * BLOCK_N
                z = a + tl.maximum(full_hi - a, 0) // BLOCK_N * BLOCK_N
                has_full = z > a
                a = tl.where(has_full, a, key_hi)
                z = tl.where(has_full, z, key_hi)
            else:
                a = key_hi
                z = key_hi
            # without UNMASKED_INTERIOR one masked loop over [key_lo, key_hi), compiled alone
            for part in tl.static_range(3 if UNMASKED_INTERIOR else 1):
                acc, m_i, l_i = _attend_range(
                    acc, m_i, l_i, key_lo if part == 0 else (a if part == 1 else z),
                    a if part == 0 else (z if part == 1 else key_hi), q_nope, q_rope, qs, qs_rope, key_hi, t,
                    num_heads, num_q, num_keys, seg_lo, seg_hi, mask_code, window, blocks_ptr, scales_ptr, rope_ptr,
                    lookup_row, layer_offset, s_layer_offset, r_layer_offset, page_size, stride_blk_b, stride_blk_s,
                    stride_s_b, stride_s_s, stride_r_b, stride_r_s, qk_scale, KV_LORA_RANK, ROPE_DIM, BLOCK_M, BLOCK_N,
                    BLOCK_IN_PAGE, INTERPRET, IEEE, QUANT, G, LAT_MODE, LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, CD,
                    ROPE_AWARE, ROPE_OFF, SPLIT_QS, PREFETCH_TABLE, part != 1)

            has = l_i > 0
            lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * LN2, float("-inf"))
            # the rows' indices recomputed after the key loops; the opaque zero keeps the compiler from merging
            # them with the copies made before the loops (the layout that run E measured)
            offs_e = offs_m + zero
            m_ok = offs_e < num_q * num_heads
            tok = offs_e // num_heads
            head = offs_e % num_heads
            if (seg_lo == 0) & (seg_hi == num_keys):
                # the whole sequence is here: finish (the sink joins the denominator only) and write out
                denom = l_i
                if HAS_SINK:
                    sink = tl.load(sink_ptr + head, mask=m_ok, other=float("-inf")) * LOG2E
                    denom += tl.exp2(sink - tl.where(has, m_i, 0.0))
                inv = tl.where(has, 1.0 / tl.where(has, denom, 1.0), 0.0)
                o_row = (row_start + tok).to(tl.int64) * stride_o_t + head.to(tl.int64) * stride_o_h
                tl.store(out_ptr + o_row[:, None] + offs_d[None, :], (acc * inv[:, None]).to(out_ptr.dtype.element_ty),
                         mask=m_ok[:, None])
                tl.store(lse_ptr + (row_start + tok).to(tl.int64) * stride_lse_t + head * stride_lse_h, lse, mask=m_ok)
            else:
                slot = (2 * w + (b != first_seq).to(tl.int32)).to(tl.int64)
                inv = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)
                # L2 policy evict_last: see `mla_sparse_decode_ring._store_rows`
                tl.store(part_out_ptr + slot * stride_po_s + offs_e[:, None].to(tl.int64) * stride_po_r
                         + offs_d[None, :], acc * inv[:, None], mask=m_ok[:, None], eviction_policy="evict_last")
                tl.store(part_lse_ptr + slot * stride_pl_s + offs_e, lse, mask=m_ok, eviction_policy="evict_last")
        b += 1


@triton.jit
def _partial_rows(part_out_ptr, part_lse_ptr, slot, ok, offs_m, offs_d, stride_po_s, stride_po_r, stride_pl_s):
    """The LSEs `[P, R]` and partial rows `[P, R, DV]` of pieces in `slot` `[P]`, rows offs_m, columns offs_d
    (where `ok` `[P, R]` is false: -inf and 0)."""
    lse = tl.load(part_lse_ptr + slot[:, None] * stride_pl_s + offs_m[None, :], mask=ok, other=float("-inf"))
    o = tl.load(part_out_ptr + slot[:, None, None] * stride_po_s + offs_m[None, :, None].to(tl.int64) * stride_po_r
                + offs_d[None, None, :], mask=ok[:, :, None], other=0.0)
    return lse, o


@triton.jit(do_not_specialize=["batch", "num_heads", "num_workers"])
def _mla_decode_combine_kernel(
    out_ptr, lse_ptr, offsets_ptr, schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr,
    batch, num_heads, num_workers,
    stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
    BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_P: tl.constexpr, HAS_SINK: tl.constexpr,
    PDL: tl.constexpr, BLOCK_T: tl.constexpr = 0,
):
    """Program (sequence b, rows block, columns block): merge the pieces of a split sequence by LSE, BLOCK_P +
    BLOCK_T of them a step (a second, small tile of BLOCK_T pieces after the first: 67 pieces as 64 + 4 instead
    of one tile of 128, whose masked lanes took registers and instructions all the same).

    Piece 0 is the first worker's slot from the schedule, piece k > 0 is slot `2 * (first + k)` (a later worker
    starts inside b, so b is its first sequence). Sequences done by one worker were written by the main kernel.
    PDL: launched as a programmatic dependent of the main kernel, so it waits for that kernel to end (and its
    writes to be visible) before reading anything.
    """
    if PDL:
        gdc_wait()
        # the next kernel, if launched the same way, may be scheduled (it waits for this one's end)
        gdc_launch_dependents()
    b = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.program_id(2) * BLOCK_DV + tl.arange(0, BLOCK_DV)
    seq = schedule_ptr + (1 + num_workers + b) * 4
    first = tl.load(seq)
    num_pieces = tl.load(seq + 1) - first + 1
    first_slot = tl.load(seq + 2)
    row_start = tl.load(offsets_ptr + b)
    num_rows = (tl.load(offsets_ptr + b + 1) - row_start) * num_heads
    if (num_pieces > 1) & (tl.program_id(1) * BLOCK_R < num_rows):
        m_ok = offs_m < num_rows
        offs_p = tl.arange(0, BLOCK_P)
        acc = tl.zeros([BLOCK_R, BLOCK_DV], dtype=tl.float32)
        m_i = tl.full([BLOCK_R], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
        p0 = 0
        while p0 < num_pieces:
            piece = p0 + offs_p
            p_ok = piece < num_pieces
            slot = tl.where(piece == 0, first_slot, 2 * (first + piece)).to(tl.int64)
            ok = p_ok[:, None] & m_ok[None, :]
            lse_p, o_p = _partial_rows(part_out_ptr, part_lse_ptr, slot, ok, offs_m, offs_d, stride_po_s,
                                       stride_po_r, stride_pl_s)
            m_new = tl.maximum(m_i, tl.max(lse_p, 0))
            if BLOCK_T > 0:
                piece_t = p0 + BLOCK_P + tl.arange(0, BLOCK_T)  # never piece 0
                slot_t = (2 * (first + piece_t)).to(tl.int64)
                ok_t = (piece_t < num_pieces)[:, None] & m_ok[None, :]
                lse_t, o_t = _partial_rows(part_out_ptr, part_lse_ptr, slot_t, ok_t, offs_m, offs_d, stride_po_s,
                                           stride_po_r, stride_pl_s)
                m_new = tl.maximum(m_new, tl.max(lse_t, 0))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            weight = tl.exp(lse_p - m_safe[None, :])
            l_step = tl.sum(weight, 0)
            o_step = tl.sum(weight[:, :, None] * o_p, 0)
            if BLOCK_T > 0:
                weight_t = tl.exp(lse_t - m_safe[None, :])
                l_step += tl.sum(weight_t, 0)
                o_step += tl.sum(weight_t[:, :, None] * o_t, 0)
            l_i = l_i * alpha + l_step
            acc = acc * alpha[:, None] + o_step
            m_i = m_new
            p0 += BLOCK_P + BLOCK_T
        has = l_i > 0
        lse = tl.where(has, m_i + tl.log(tl.where(has, l_i, 1.0)), float("-inf"))
        inv = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)
        tok = offs_m // num_heads
        head = offs_m % num_heads
        if HAS_SINK:
            # e^lse / (e^lse + e^sink): a +inf sink gives 0
            sink = tl.load(sink_ptr + head, mask=m_ok, other=float("-inf"))
            inv = tl.where(has, inv / (1.0 + tl.exp(sink - tl.where(has, lse, 0.0))), 0.0)
        o_row = (row_start + tok).to(tl.int64) * stride_o_t + head.to(tl.int64) * stride_o_h
        tl.store(out_ptr + o_row[:, None] + offs_d[None, :], (acc * inv[:, None]).to(out_ptr.dtype.element_ty),
                 mask=m_ok[:, None])
        if tl.program_id(2) == 0:
            tl.store(lse_ptr + (row_start + tok).to(tl.int64) * stride_lse_t + head * stride_lse_h, lse, mask=m_ok)
