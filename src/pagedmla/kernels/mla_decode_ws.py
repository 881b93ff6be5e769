"""Warp-specialized dense MLA decode for Hopper, in Gluon, for 64-row tiles of one query token's heads.

Same work decomposition as `pagedmla.kernels.mla_decode` (program = worker w x row tile t over the split-KV
schedule, partial results merged by its combine kernel), for head counts that are multiples of 64: a 64-row
tile is then 64 heads of one query token, so every row of it sees the same key interval [lo, hi) under every
mask. Partitions:
- a 1-warp loader issues TMA copies: the tile's q (512 latent + 64 rope columns) once per sequence, then each
  64-key block of the cache (one page piece: page sizes are multiples of 64) into a 2-deep ring. A block is
  stored as two 32-key halves by two 256-column halves (plus the rope columns), so each piece is an operand on
  its own: the cache row's first 512 columns serve as the keys' latent part and as the values.
- two 4-warp consumers. Consumer c computes the logits of key half c (S_c = q k_c^T, 64 x 32, K = 576) and owns
  output columns [256 c, 256 c + 256). The consumers swap their probabilities through shared memory each block:
  each writes P_c = exp2(S_c - m_c) with its running max m_c, reads the other's, rescales both to the common
  max, and runs O_c += P_0 V_0[:, cols c] + P_1 V_1[:, cols c] with P from registers.
  This splits both the logits and the output between the warpgroups, with no MMA done twice.

Keys outside [lo, hi) are masked in S; in the (at most two) edge blocks of a range their value rows are also
zeroed in shared memory, since unused cache slots may hold NaN and 0 * NaN is NaN. Compiled only for sm_90
(warpgroup MMAs, TMA); the CPU interpreter cannot run Gluon, so this path is tested in the gpu tier against
the Triton kernel and the reference.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

D_LAT = gl.constexpr(512)
D_ROPE = gl.constexpr(64)
COLS = gl.constexpr(256)  # output (and latent) columns per consumer
BLOCK_M = gl.constexpr(64)
BLOCK_N = gl.constexpr(64)
KEYS = gl.constexpr(32)  # keys per consumer per block
LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)


@gluon.constexpr_function
def _mma_layout(n):
    """Accumulator layout of a 64-row warpgroup MMA over n columns (one consumer's 4 warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def _piece(schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, t, batch, num_heads, num_workers, mask_code,
           window):
    """The key interval [lo, hi) of tile t's rows in worker w's piece of sequence b, the piece's flags (rows
    present, whole sequence) and the tile's query row (token, first head). Every partition computes it."""
    sched = schedule_ptr + (1 + w) * 4
    first_seq = gl.load(sched)
    first_key = gl.load(sched + 1)
    last_seq = gl.load(sched + 2)
    stop_key = gl.load(sched + 3)
    row_start = gl.load(offsets_ptr + b)
    num_q = gl.load(offsets_ptr + b + 1) - row_start
    num_keys = gl.load(cache_lengths_ptr + b) + num_q
    seg_lo = gl.where(b == first_seq, first_key, 0)
    seg_hi = gl.where(b == last_seq, gl.minimum(stop_key, num_keys), num_keys)
    tok = t * BLOCK_M // num_heads
    active = (tok < num_q) & (seg_lo < seg_hi)
    # the masks of pagedmla.masks for the tile's one query position (kernels.common.visible_range)
    pos = num_keys - num_q + tok
    causal = (mask_code == 1) | (mask_code == 2) | (mask_code == 5)
    sliding = (mask_code == 2) | (mask_code == 3)
    chunked = (mask_code == 4) | (mask_code == 5)
    win = gl.maximum(window, 1)
    lo = gl.where(sliding, pos - win + 1, 0)
    lo = gl.where(chunked, pos // win * win, lo)
    hi = gl.where(chunked, gl.minimum(num_keys, (pos // win + 1) * win), num_keys)
    hi = gl.where(causal, gl.minimum(hi, pos + 1), hi)
    lo = gl.maximum(gl.maximum(lo, 0), seg_lo)
    hi = gl.minimum(hi, seg_hi)
    k_lo = lo - lo % BLOCK_N
    n_blocks = gl.where(active & (hi > lo), gl.cdiv(hi - k_lo, BLOCK_N), 0)
    whole = (seg_lo == 0) & (seg_hi == num_keys)
    return active, whole, lo, hi, k_lo, n_blocks, row_start + tok, t * BLOCK_M % num_heads


@gluon.jit
def _loader(q_desc, qr_desc, k_desc, kr_desc, q_s, qr_s, k_s, kr_s, q_ready, q_empty, k_ready, k_empty,
            schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, w, t, batch, num_heads, num_workers,
            mask_code, window, stride_lt_b, page_size, page_rows, layer_row0, STAGES: gl.constexpr):
    """TMA copies of each piece's q tile and key blocks (block i into ring slot i % STAGES)."""
    first_seq = gl.load(schedule_ptr + (1 + w) * 4)
    last_seq = gl.minimum(gl.load(schedule_ptr + (1 + w) * 4 + 2), batch - 1)
    c = 0
    pieces = 0
    for b in range(first_seq, last_seq + 1):
        active, whole, lo, hi, k_lo, n_blocks, q_tok, head0 = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, t, batch, num_heads, num_workers, mask_code, window)
        if n_blocks > 0:
            lookup_row = lookup_ptr + b.to(gl.int64) * stride_lt_b
            page = gl.load(lookup_row + k_lo // page_size)
            for i in range(n_blocks):
                k0 = k_lo + i * BLOCK_N
                # the next block's table entry is loaded before this block waits for its ring slot
                k_next = gl.minimum(k0 + BLOCK_N, hi - 1)
                page_next = gl.load(lookup_row + k_next // page_size)
                st = c % STAGES
                # a fresh barrier passes a wait for parity 1: the first STAGES blocks go at once
                mbarrier.wait(k_empty.index(st), ((c // STAGES) & 1) ^ 1)
                row = page * page_rows + layer_row0 + k0 % page_size
                bar = k_ready.index(st)
                mbarrier.expect(bar, 4 * k_desc.block_type.nbytes + 2 * kr_desc.block_type.nbytes)
                for kh in gl.static_range(2):
                    for ch in gl.static_range(2):
                        tma.async_copy_global_to_shared(k_desc, [row + KEYS * kh, COLS * ch], bar,
                                                        k_s.index(st * 4 + kh * 2 + ch))
                    tma.async_copy_global_to_shared(kr_desc, [row + KEYS * kh, D_LAT], bar, kr_s.index(st * 2 + kh))
                page = page_next
                c += 1
                if i == 0:
                    # the q tile after the piece's first block: that block's copy need not wait for the previous
                    # piece to finish with q. Rows (token, heads head0..head0+63) of q viewed as [T * H, 576]
                    q_row = q_tok * num_heads + head0
                    mbarrier.wait(q_empty, (pieces & 1) ^ 1)
                    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
                    for ch in gl.static_range(2):
                        tma.async_copy_global_to_shared(q_desc, [q_row, COLS * ch], q_ready, q_s.index(ch))
                    tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)
            pieces += 1


@gluon.jit
def _clean_edge(k_s, clean, clean_count, st, k0, lo, hi, C: gl.constexpr):
    """Zero the latent columns of this consumer's key half in ring slot st for keys outside [lo, hi), then wait
    for the other consumer's half (both halves serve as values in both consumers' P @ V)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    j = k0 + KEYS * C + gl.arange(0, KEYS, gl.SliceLayout(1, layout))
    keep = ((j >= lo) & (j < hi))[:, None]
    for ch in gl.static_range(2):
        part = k_s.index(st * 4 + C * 2 + ch)
        x = part.load(layout)
        part.store(gl.where(keep, x, gl.zeros_like(x)))
    fence_async_shared()  # the MMAs read shared memory through the async proxy
    mbarrier.arrive(clean)
    mbarrier.wait(clean, clean_count & 1)
    return clean_count + 1


@gluon.jit
def _issue_logits(q_s, qr_s, k_s, kr_s, st, C: gl.constexpr):
    """S_C = q k_C^T of ring slot st, as three asynchronous MMA groups (two latent halves, the rope part)."""
    s_layout: gl.constexpr = _mma_layout(KEYS)
    s = gl.zeros([BLOCK_M, KEYS], gl.float32, s_layout)
    s = warpgroup_mma(q_s.index(0), k_s.index(st * 4 + C * 2).permute((1, 0)), s, use_acc=False, is_async=True)
    s = warpgroup_mma(q_s.index(1), k_s.index(st * 4 + C * 2 + 1).permute((1, 0)), s, is_async=True)
    return warpgroup_mma(qr_s, kr_s.index(st * 2 + C).permute((1, 0)), s, is_async=True)


@gluon.jit
def _consumer(C: gl.constexpr, q_s, qr_s, k_s, kr_s, p_x, m_x, q_ready, q_empty, k_ready, k_empty, x_full, x_free,
              clean, schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
              part_lse_ptr, w, t, batch, num_heads, num_workers, mask_code, window, qk_scale,
              stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
              HAS_SINK: gl.constexpr, STAGES: gl.constexpr):
    """Consumer C: logits of key half C, output columns [256 C, 256 C + 256) of each piece."""
    s_layout: gl.constexpr = _mma_layout(KEYS)
    o_layout: gl.constexpr = _mma_layout(COLS)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    first_seq = gl.load(schedule_ptr + (1 + w) * 4)
    last_seq = gl.minimum(gl.load(schedule_ptr + (1 + w) * 4 + 2), batch - 1)
    c = 0
    pieces = 0
    cleans = 0
    for b in range(first_seq, last_seq + 1):
        active, whole, lo, hi, k_lo, n_blocks, q_tok, head0 = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, t, batch, num_heads, num_workers, mask_code, window)
        if active:
            m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
            l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
            acc = gl.zeros([BLOCK_M, COLS], gl.float32, o_layout)
            if n_blocks > 0:
                mbarrier.wait(q_ready, pieces & 1)
                st = c % STAGES
                mbarrier.wait(k_ready.index(st), (c // STAGES) & 1)
                if (k_lo < lo) | (k_lo + BLOCK_N > hi):
                    cleans = _clean_edge(k_s, clean, cleans, st, k_lo, lo, hi, C)
                s = _issue_logits(q_s, qr_s, k_s, kr_s, st, C)
                s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
                for i in range(n_blocks):
                    k0 = k_lo + i * BLOCK_N
                    st = c % STAGES
                    s = s * qk_scale
                    if (k0 < lo) | (k0 + BLOCK_N > hi):
                        j = k0 + KEYS * C + gl.arange(0, KEYS, gl.SliceLayout(0, s_layout))
                        s = gl.where(((j >= lo) & (j < hi))[None, :], s, float("-inf"))
                    # this half's probabilities against its own running max, swapped with the other half's
                    m_own = gl.maximum(m_i, gl.max(s, axis=1))
                    m_own_safe = gl.where(m_own == float("-inf"), 0.0, m_own)
                    p_own = gl.exp2(s - m_own_safe[:, None])
                    mbarrier.wait(x_free.index(C), (c & 1) ^ 1)
                    p_x.index(C).store(p_own.to(gl.float16))
                    m_x.index(C).store(m_own)
                    mbarrier.arrive(x_full.index(C))
                    mbarrier.wait(x_full.index(1 - C), c & 1)
                    p_oth = p_x.index(1 - C).load(s_layout).to(gl.float32)
                    m_oth = m_x.index(1 - C).load(row_layout)
                    mbarrier.arrive(x_free.index(1 - C))
                    # both consumers compute the same common max (max is exact and symmetric)
                    m_new = gl.maximum(m_own, m_oth)
                    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
                    m_oth_safe = gl.where(m_oth == float("-inf"), 0.0, m_oth)
                    p_own = p_own * gl.exp2(m_own_safe - m_safe)[:, None]
                    p_oth = p_oth * gl.exp2(m_oth_safe - m_safe)[:, None]
                    alpha = gl.exp2(m_i - m_safe)
                    l_i = l_i * alpha + gl.sum(p_own, axis=1) + gl.sum(p_oth, axis=1)
                    m_i = m_new
                    if C == 0:
                        p_lo = p_own
                        p_hi = p_oth
                    else:
                        p_lo = p_oth
                        p_hi = p_own
                    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                    pv = warpgroup_mma(gl.convert_layout(p_lo.to(gl.bfloat16), p_op_layout),
                                       k_s.index(st * 4 + C), acc, is_async=True)
                    pv = warpgroup_mma(gl.convert_layout(p_hi.to(gl.bfloat16), p_op_layout),
                                       k_s.index(st * 4 + 2 + C), pv, is_async=True)
                    # the next block's logits queue behind this block's P @ V; when both retire, this block's
                    # ring slot can be refilled
                    if i + 1 < n_blocks:
                        nst = (c + 1) % STAGES
                        mbarrier.wait(k_ready.index(nst), ((c + 1) // STAGES) & 1)
                        if k0 + 2 * BLOCK_N > hi:
                            cleans = _clean_edge(k_s, clean, cleans, nst, k0 + BLOCK_N, lo, hi, C)
                        s_next = _issue_logits(q_s, qr_s, k_s, kr_s, nst, C)
                        # P @ V retires before the next logits' three MMA groups: release the slot then, so
                        # the loader refills it while the logits run
                        acc = warpgroup_mma_wait(num_outstanding=3, deps=(pv,))
                        mbarrier.arrive(k_empty.index(st))
                        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_next,))
                    else:
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                        mbarrier.arrive(k_empty.index(st))
                    c += 1
                mbarrier.arrive(q_empty)
                pieces += 1

            has = l_i > 0.0
            m_use = gl.where(has, m_i, 0.0)
            l_safe = gl.where(has, l_i, 1.0)
            lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
            rows = gl.arange(0, BLOCK_M, row_layout)
            denom = l_safe
            if whole:
                if HAS_SINK:
                    denom = denom + gl.exp2(gl.load(sink_ptr + head0 + rows) * LOG2E - m_use)
            inv = gl.where(has, 1.0 / denom, 0.0)
            out = acc * gl.convert_layout(inv, gl.SliceLayout(1, o_layout))[:, None]
            r = gl.arange(0, BLOCK_M, gl.SliceLayout(1, o_layout))
            d = COLS * C + gl.arange(0, COLS, gl.SliceLayout(0, o_layout))
            if whole:
                gl.store(out_ptr + q_tok.to(gl.int64) * stride_o_t + (head0 + r).to(gl.int64)[:, None] * stride_o_h
                         + d[None, :], out.to(out_ptr.dtype.element_ty))
                if C == 0:
                    gl.store(lse_ptr + q_tok.to(gl.int64) * stride_lse_t + (head0 + rows) * stride_lse_h, lse)
            else:
                slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
                gl.store(part_out_ptr + slot * stride_po_s + (t * BLOCK_M + r).to(gl.int64)[:, None] * stride_po_r
                         + d[None, :], out)
                if C == 0:
                    gl.store(part_lse_ptr + slot * stride_pl_s + t * BLOCK_M + rows, lse)


@gluon.jit
def _mla_decode_ws_kernel(
    q_desc, qr_desc, k_desc, kr_desc, out_ptr, lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, schedule_ptr,
    sink_ptr, part_out_ptr, part_lse_ptr,
    batch, num_heads, num_workers, num_tiles, mask_code, window, qk_scale, page_size, page_rows, layer_row0,
    stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
    HAS_SINK: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
):
    """Program (worker w, row tile t), as `_mla_decode_kernel`. The cache is read through `k_desc` / `kr_desc`,
    2-D views `[rows, 576]` of the cache in which page p's slot s of this layer is row
    `p * page_rows + layer_row0 + s`."""
    pid = gl.program_id(0)
    w = pid // num_tiles
    t = pid % num_tiles

    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_M, COLS], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_ROPE], qr_desc.layout)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, KEYS, COLS], k_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 2, KEYS, D_ROPE], kr_desc.layout)
    p_x = gl.allocate_shared_memory(gl.float16, [2, BLOCK_M, KEYS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    m_x = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    q_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    clean = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    x_full = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    x_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=2)  # one arrival per consumer
    mbarrier.init(clean, count=2)
    for st in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(st), count=1)
        mbarrier.init(k_empty.index(st), count=2)
    for i in gl.static_range(2):
        mbarrier.init(x_full.index(i), count=1)
        mbarrier.init(x_free.index(i), count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (0, q_s, qr_s, k_s, kr_s, p_x, m_x, q_ready, q_empty, k_ready, k_empty, x_full, x_free, clean,
                     schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                     part_lse_ptr, w, t, batch, num_heads, num_workers, mask_code, window, qk_scale,
                     stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
                     HAS_SINK, STAGES)),
        (_consumer, (1, q_s, qr_s, k_s, kr_s, p_x, m_x, q_ready, q_empty, k_ready, k_empty, x_full, x_free, clean,
                     schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                     part_lse_ptr, w, t, batch, num_heads, num_workers, mask_code, window, qk_scale,
                     stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
                     HAS_SINK, STAGES)),
        (_loader, (q_desc, qr_desc, k_desc, kr_desc, q_s, qr_s, k_s, kr_s, q_ready, q_empty, k_ready, k_empty,
                   schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, w, t, batch, num_heads, num_workers,
                   mask_code, window, stride_lt_b, page_size, page_rows, layer_row0, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])
