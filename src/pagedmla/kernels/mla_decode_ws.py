"""Warp-specialized dense MLA decode for Hopper, in Gluon, for 64-row tiles of query rows (token x heads).

Same work decomposition as `pagedmla.kernels.mla_decode` (program = worker w x row tile t over the split-KV
schedule, partial results merged by its combine kernel), for head counts that are multiples of 64 or divide 64:
tile t holds the sequence's query rows 64 t to 64 t + 63 (row = token x H + head), 64 heads of one query token
or the heads of 64 / H tokens (16 heads x 4 tokens: MTP at TP8). Each row sees its own token's keys [lo_r, hi_r)
under the mask; the tile streams the blocks of their union [lo, hi), and S is masked per row in the blocks at
some row's edge. Rows past the sequence's tokens see no key and are not written. Two partitions, 4-warp
consumers (a third, loader partition would make Triton compile every thread under 168 registers, and ptxas then
serializes the MMAs):
- consumer 0 also issues the TMA copies: the tile's q (512 latent + 64 rope columns) once per piece of a
  sequence, then each 64-key block of the cache (a page piece: page sizes are multiples of 64) into a 2-slot
  ring, as two 256-column latent halves and the rope columns, once consumer 1 released the slot. The latent
  columns serve as the keys' latent part and as the values.
- consumer c owns output columns [256 c, 256 c + 256). They take the key blocks in pairs
  (a, b) and split the work of a pair so that one's softmax runs while the other's MMAs do ("seesaw"):
    consumer 0: S_a = q k_a^T; m_a = max(m, rowmax S_a); P_a = exp(S_a - m_a); O_0 = O_0 e^(m - m_a) + P_a V_a
    consumer 1: S_b = q k_b^T (while consumer 0 works on a); m_b = max(m_a, rowmax S_b); P_b = exp(S_b - m_b);
                O_1 = O_1 e^(m - m_b) + P_b V_b
    consumer 0: O_0 = O_0 e^(m_a - m_b) + P_b V_b          (P_b from shared memory)
    consumer 1: O_1 += P_a e^(m_a - m_b) V_a                (consumer 0 stores P_a rescaled)
  so each block's logits are computed once, by one warpgroup, as 64 x 64 MMAs. The running max and row sum
  pass between them through shared memory with mbarriers; each P goes into its block's rope columns (read by
  the logits only, which have retired by then), where it is an MMA operand as it stands.
- the epilogue (TMA_OUT: heads a multiple of 64, out writable as rows of 512): each consumer writes its
  normalized 64 x 256 tile into shared memory it no longer reads (consumer 0: q's tiles; consumer 1: ring slot
  1) and stores it with TMA stores, bf16 into `out` or float32 into the partial rows (in four 64-column
  quarters, each stored as soon as it is staged) (`_stage_and_store`); otherwise from registers.

Keys outside a row's [lo_r, hi_r) are masked in S; in the (at most two) edge blocks of the tile's [lo, hi), the
consumer computing the block's logits also zeroes the value rows of the keys outside it in shared memory before
either consumer's P @ V, since unused cache slots may hold NaN and 0 * NaN is NaN. Compiled only for sm_90
(warpgroup MMAs, TMA); the CPU interpreter cannot run Gluon, so this path is tested in the gpu tier against the
reference.
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

from .gluon_common import (
    BLOCK_M,
    COLS,
    D_LAT,
    D_ROPE,
    LN2,
    LOG2E,
    mma_layout,
    opaque_zero,
    visible_range,
    wait_for_prior_grid,
)

BLOCK_N = gl.constexpr(64)


@gluon.jit
def _visible(pos, num_keys, seg_lo, seg_hi, mask_code, window):
    """`gluon_common.visible_range` within the piece `[seg_lo, seg_hi)`; both ends still grow with pos."""
    lo, hi = visible_range(pos, num_keys, mask_code, window)
    return gl.maximum(lo, seg_lo), gl.minimum(hi, seg_hi)


@gluon.jit
def _piece(schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, t, num_heads, mask_code, window,
           row_layout: gl.constexpr, TILE: gl.constexpr):
    """Tile t (of TILE rows: 64 here, 16 in `mla_decode_ws16`) of worker w's piece of sequence b. Row r of the
    tile is the sequence's query row t * TILE + r: token (t * TILE + r) // H, head (t * TILE + r) % H (64 heads
    of one token when H is a multiple of 64; several tokens' heads when H divides 64, e.g. 16 heads x 4
    tokens). Returns (the tile has rows and keys, the piece is the whole sequence, the rows' key range
    [lo, hi), k_lo, its blocks, the sequence's first q row, its query tokens, each row's visible keys
    [lo_r, hi_r) in `row_layout`, the largest lo_r and smallest hi_r of the tile's rows). Every partition
    computes it."""
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
    active = (t * TILE // num_heads < num_q) & (seg_lo < seg_hi)
    # each row's keys (rows past the sequence's tokens see none); a row's lo and hi grow with its token under
    # every mask, so the tile's range and innermost edges are its first and last tokens' (no reduction across
    # the warps)
    tok = (t * TILE + gl.arange(0, TILE, row_layout)) // num_heads
    lo_r, hi_r = _visible(num_keys - num_q + tok, num_keys, seg_lo, seg_hi, mask_code, window)
    row_ok = tok < num_q
    lo_r = gl.where(row_ok, lo_r, num_keys)
    hi_r = gl.where(row_ok, hi_r, 0)
    first = t * TILE // num_heads
    last = gl.minimum(num_q - 1, (t * TILE + TILE - 1) // num_heads)
    lo, hi_min = _visible(num_keys - num_q + first, num_keys, seg_lo, seg_hi, mask_code, window)
    lo_max, hi = _visible(num_keys - num_q + last, num_keys, seg_lo, seg_hi, mask_code, window)
    k_lo = lo - lo % BLOCK_N
    n_blocks = gl.where(active & (hi > lo), gl.cdiv(hi - k_lo, BLOCK_N), 0)
    whole = (seg_lo == 0) & (seg_hi == num_keys)
    return active, whole, lo, hi, k_lo, n_blocks, row_start, num_q, lo_r, hi_r, lo_max, hi_min


@gluon.jit
def _load_block(k_desc, kr_desc, k_s, kr_s, k_ready, k_empty, c, k0, page, page_size, page_rows, layer_row0):
    """TMA copies of the key block at k0 (in table entry `page`) into ring slot c % 2, once consumer 1 has
    released the slot (a fresh barrier passes a wait for parity 1: the first two blocks go at once)."""
    st = c % 2
    mbarrier.wait(k_empty.index(st), ((c // 2) & 1) ^ 1)
    row = page * page_rows + layer_row0 + k0 % page_size
    bar = k_ready.index(st)
    mbarrier.expect(bar, 2 * k_desc.block_type.nbytes + kr_desc.block_type.nbytes)
    for ch in gl.static_range(2):
        tma.async_copy_global_to_shared(k_desc, [row, COLS * ch], bar, k_s.index(st * 2 + ch))
    tma.async_copy_global_to_shared(kr_desc, [row, D_LAT], bar, kr_s.index(st))


@gluon.jit
def _load_q(q_desc, qr_desc, q_s, qr_s, q_ready, q_empty, pieces, row_start, num_heads, t):
    """TMA copies of the piece's q tile once consumer 1 is done with the previous piece's."""
    mbarrier.wait(q_empty, (pieces & 1) ^ 1)
    mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
    # the tile's rows of q viewed as [T * H, 576] (row = token * H + head): the sequence's from row_start * H on
    # (rows past its tokens are another's or zeros; they see no key)
    q_row = row_start * num_heads + t * BLOCK_M
    for ch in gl.static_range(2):
        tma.async_copy_global_to_shared(q_desc, [q_row, COLS * ch], q_ready, q_s.index(ch))
    tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)


@gluon.jit
def _page(lookup_row, k0, hi, page_size):
    """The table entry of the key block at k0 (the last visible key's for a block past hi: a used page)."""
    return gl.load(lookup_row + gl.minimum(k0, hi - 1) // page_size)


@gluon.jit
def _logits(q_s, qr_s, k_s, kr_s, k_ready, c, k0, lo, hi, lo_r, hi_r, lo_max, hi_min, qk_scale):
    """Wait for block c's slot, zero its value rows outside the tile's keys [lo, hi) if it is an edge block, and
    return the scaled logits S = q k^T (64 x 64, computed by this consumer alone), each row masked to its keys
    [lo_r, hi_r) where the block is an edge block of some row (`lo_max`, `hi_min`: the rows' innermost edges)."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    st = c % 2
    mbarrier.wait(k_ready.index(st), (c // 2) & 1)
    edge = (k0 < lo) | (k0 + BLOCK_N > hi)
    if edge:
        layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
        j = k0 + gl.arange(0, BLOCK_N, gl.SliceLayout(1, layout))
        keep = ((j >= lo) & (j < hi))[:, None]
        for ch in gl.static_range(2):
            part = k_s.index(st * 2 + ch)
            x = part.load(layout)
            part.store(gl.where(keep, x, gl.zeros_like(x)))
        fence_async_shared()  # the MMAs read shared memory through the async proxy
    s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    # q's tiles through an opaque 0: with compile-time indices the compiler computes their 32 MMA descriptors once,
    # ahead of the loop, and spills them
    dyn = opaque_zero(c)
    s = warpgroup_mma(q_s.index(dyn), k_s.index(st * 2).permute((1, 0)), s, use_acc=False, is_async=True)
    s = warpgroup_mma(q_s.index(1 + dyn), k_s.index(st * 2 + 1).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma(qr_s, kr_s.index(st).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,)) * qk_scale
    if (k0 < lo_max) | (k0 + BLOCK_N > hi_min):
        j = k0 + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        s = gl.where((j[None, :] >= lo_r[:, None]) & (j[None, :] < hi_r[:, None]), s, float("-inf"))
    return s


@gluon.jit
def _no_inf(x):
    """x with -inf replaced by 0: rows that have seen no visible key shift by 0, so exp2 gives 0, not NaN."""
    return gl.where(x == float("-inf"), 0.0, x)


QUARTER = gl.constexpr(64)


@gluon.jit
def _quarters(x):
    """The four 64-column quarters of a `[64, 256]` accumulator tile, in registers: the two column bits that
    select a quarter are register bits of the accumulator's layout (no data moves between threads)."""
    x = gl.permute(gl.reshape(x, [BLOCK_M, 4, QUARTER]), (0, 2, 1))  # [64, 64, quarter]
    even, odd = gl.split(gl.reshape(x, [BLOCK_M, QUARTER, 2, 2]))  # quarter = 2 hi + lo: lo 0 / 1
    q0, q2 = gl.split(even)
    q1, q3 = gl.split(odd)
    return q0, q1, q2, q3


@gluon.jit
def _stage_and_store(C: gl.constexpr, out, whole, q_s, k_s, out_desc, po_desc, q_empty, c0_done, c1_stored, pieces,
                     epis, out_row, po_row):
    """Consumer C's normalized output tile `out` `[64, 256]` to memory by TMA stores through shared memory: as
    bf16 into `out_desc`'s rows from out_row (a whole sequence), else as float32 into the partial rows from
    po_row, quarter by quarter. Register stores of the accumulator's layout write a few bytes of 8 rows per
    instruction; this epilogue took 6.9 us at 128 heads B64 N4096 and 4.8 us at B1 N16384 against under 1 us
    with the stores predicated off (benchmarks/experiments/ws_timeline.py, BENCHMARKS.md, eighteenth session).

    The tiles: consumer 0 stages in q's tiles once consumer 1 is done reading q (`q_empty`); consumer 1 in ring
    slot 1 once consumer 0 is done with the piece's blocks (`c0_done`). Each waits until its stores have read
    the tiles; consumer 1 then arrives on `c1_stored`, which consumer 0 waits for before the next piece's copies
    and at its next epilogue (so the two stay within one epilogue of each other and every parity wait names one
    phase; benchmarks/experiments/ws_protocol_model.py checks this protocol over random interleavings)."""
    if C == 0:
        mbarrier.wait(c1_stored, (epis & 1) ^ 1)
        mbarrier.arrive(c0_done)
        if pieces > 0:
            mbarrier.wait(q_empty, (pieces - 1) & 1)
    else:
        mbarrier.wait(c0_done, epis & 1)
    if whole:
        if C == 0:
            stage = q_s.index(0)
        else:
            stage = k_s.index(2)
        stage.store(out.to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()  # every thread's part of the tile is written before the store reads it
        tma.async_copy_shared_to_global(out_desc, [out_row, COLS * C], stage)
    else:
        # four 64-column stores (po_desc: [64, 64] boxes), each issued once its quarter is staged, so that
        # staging the next quarter overlaps the store of this one: batch 1 at 128 heads took 23.2 against 24.0 us
        # a call with one [64, 256] store (BENCHMARKS.md, twenty-sixth session)
        if C == 0:
            tiles = q_s._reinterpret(gl.float32, [4, BLOCK_M, QUARTER], po_desc.layout)
        else:
            tiles = k_s._reinterpret(gl.float32, [8, BLOCK_M, QUARTER], po_desc.layout)
        parts = _quarters(out)
        for i in gl.static_range(4):
            tile = tiles.index(4 * C + i)
            tile.store(parts[i])
            fence_async_shared()
            gl.thread_barrier()
            tma.async_copy_shared_to_global(po_desc, [po_row, COLS * C + QUARTER * i], tile)
    tma.store_wait(0)
    gl.thread_barrier()  # the stores have read the tiles (the wait holds for the thread that issued them)
    if C == 1:
        mbarrier.arrive(c1_stored)


@gluon.jit
def _consumer(C: gl.constexpr, q_desc, qr_desc, k_desc, kr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, q_empty,
              k_ready, k_empty, got_a, got_b, got_pa, stats_free, schedule_ptr, offsets_ptr, cache_lengths_ptr,
              lookup_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc, c0_done,
              c1_stored, w, t, batch, num_heads, mask_code, window, qk_scale, page_size, page_rows, layer_row0,
              stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
              HAS_SINK: gl.constexpr, TMA_OUT: gl.constexpr):
    """Consumer C: its role in each pair of key blocks (see the module docstring), output columns
    [256 C, 256 C + 256). `stats` rows: 0 m_a, 1 rowsum(P_a), 2 m_b, 3 rowsum(P_b). TMA_OUT: the output and
    partial tiles leave through shared memory by TMA stores (`_stage_and_store`)."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(COLS)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    # launched as a programmatic dependent (see `mla_decode_ring`): no thread reads memory before the previous
    # kernel is done (the wait holds for the threads that execute it, so each partition waits)
    wait_for_prior_grid(w)
    first_seq = gl.load(schedule_ptr + (1 + w) * 4)
    last_seq = gl.minimum(gl.load(schedule_ptr + (1 + w) * 4 + 2), batch - 1)
    c = 0
    pairs = 0
    pairs_b = 0  # pairs with a block b (got_b completes once per such pair)
    pieces = 0
    epis = 0  # epilogues done (one per active piece, with or without key blocks)
    for b in range(first_seq, last_seq + 1):
        active, whole, lo, hi, k_lo, n_blocks, row_start, num_q, lo_r, hi_r, lo_max, hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, t, num_heads, mask_code, window, row_layout, BLOCK_M)
        if active:
            m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
            l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
            acc = gl.zeros([BLOCK_M, COLS], gl.float32, o_layout)
            if n_blocks > 0:
                lookup_row = lookup_ptr + b.to(gl.int64) * stride_lt_b
                if C == 0:
                    if TMA_OUT:
                        # ring slot 1 held consumer 1's output tile of the previous piece until its TMA store read
                        # it: no copy of a piece may be issued before this wait (a prefetch across pieces would race)
                        mbarrier.wait(c1_stored, (epis & 1) ^ 1)
                    # consumer 0 issues the copies: q (once consumer 1 is done with the previous piece's), then
                    # the first pair's blocks. In this order batch 1 at 128 heads took 24.2 us a call against
                    # 26.2 with q after the blocks: every program asks for its first blocks at once, and q
                    # queued behind them (BENCHMARKS.md, twenty-sixth session)
                    _load_q(q_desc, qr_desc, q_s, qr_s, q_ready, q_empty, pieces, row_start, num_heads, t)
                    _load_block(k_desc, kr_desc, k_s, kr_s, k_ready, k_empty, c, k_lo,
                                _page(lookup_row, k_lo, hi, page_size), page_size, page_rows, layer_row0)
                    if n_blocks > 1:
                        _load_block(k_desc, kr_desc, k_s, kr_s, k_ready, k_empty, c + 1, k_lo + BLOCK_N,
                                    _page(lookup_row, k_lo + BLOCK_N, hi, page_size), page_size, page_rows,
                                    layer_row0)
                mbarrier.wait(q_ready, pieces & 1)
                for j in range(gl.cdiv(n_blocks, 2)):
                    ka = k_lo + 2 * j * BLOCK_N
                    has_b = 2 * j + 1 < n_blocks
                    sa = c % 2
                    sb = (c + 1) % 2
                    ph = pairs & 1
                    if C == 0:
                        # the next pair's table entries, loaded now for the copies issued at the end of this pair
                        page_a = _page(lookup_row, ka + 2 * BLOCK_N, hi, page_size)
                        page_b = _page(lookup_row, ka + 3 * BLOCK_N, hi, page_size)
                        s = _logits(q_s, qr_s, k_s, kr_s, k_ready, c, ka, lo, hi, lo_r, hi_r, lo_max, hi_min, qk_scale)
                        m_a = gl.maximum(m_i, gl.max(s, axis=1))
                        p = gl.exp2(s - _no_inf(m_a)[:, None])
                        rs_a = gl.sum(p, axis=1)
                        mbarrier.wait(stats_free, ph ^ 1)
                        stats.index(0).store(m_a)
                        stats.index(1).store(rs_a)
                        mbarrier.arrive(got_a)
                        scale_a = gl.exp2(m_i - _no_inf(m_a))
                        acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
                        pv = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op_layout), k_s.index(sa * 2), acc,
                                           is_async=True)
                        if has_b:
                            mbarrier.wait(got_b, pairs_b & 1)
                            m_b = stats.index(2).load(row_layout)
                            rs_b = stats.index(3).load(row_layout)
                            # 0 while the row has seen no key (m_a = -inf): exp2(0 - m_b) would overflow for m_b < -128
                            # and turn 0 * inf into NaN
                            scale_b = gl.exp2(m_a - _no_inf(m_b))
                            # P_a against the pair's max, for consumer 1, in block a's rope columns
                            kr_s.index(sa).store((p * scale_b[:, None]).to(gl.bfloat16))
                            fence_async_shared()
                            mbarrier.arrive(got_pa)
                            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                            acc = acc * gl.convert_layout(scale_b, o_rows)[:, None]
                            pv = warpgroup_mma(kr_s.index(sb), k_s.index(sb * 2), acc, is_async=True)
                            l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                            m_i = m_b
                            # block a's slot refills once consumer 1's P_a @ V_a is done, during this P_b @ V_b
                            if 2 * j + 2 < n_blocks:
                                _load_block(k_desc, kr_desc, k_s, kr_s, k_ready, k_empty, c + 2, ka + 2 * BLOCK_N,
                                            page_a, page_size, page_rows, layer_row0)
                        else:
                            kr_s.index(sa).store(p.to(gl.bfloat16))
                            fence_async_shared()
                            mbarrier.arrive(got_pa)
                            l_i = l_i * scale_a + rs_a
                            m_i = m_a
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                        if 2 * j + 3 < n_blocks:
                            _load_block(k_desc, kr_desc, k_s, kr_s, k_ready, k_empty, c + 3, ka + 3 * BLOCK_N, page_b,
                                        page_size, page_rows, layer_row0)
                    else:
                        s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
                        if has_b:
                            # block b's logits run while consumer 0 works on block a
                            s = _logits(q_s, qr_s, k_s, kr_s, k_ready, c + 1, ka + BLOCK_N, lo, hi, lo_r, hi_r, lo_max,
                                        hi_min, qk_scale)
                        mbarrier.wait(got_a, ph)
                        m_a = stats.index(0).load(row_layout)
                        rs_a = stats.index(1).load(row_layout)
                        mbarrier.arrive(stats_free)
                        scale_a = gl.exp2(m_i - _no_inf(m_a))
                        if has_b:
                            m_b = gl.maximum(m_a, gl.max(s, axis=1))
                            p = gl.exp2(s - _no_inf(m_b)[:, None])
                            rs_b = gl.sum(p, axis=1)
                            p_b = p.to(gl.bfloat16)
                            kr_s.index(sb).store(p_b)
                            stats.index(2).store(m_b)
                            stats.index(3).store(rs_b)
                            fence_async_shared()
                            mbarrier.arrive(got_b)
                            scale_b = gl.exp2(m_a - _no_inf(m_b))
                            acc = acc * gl.convert_layout(scale_a * scale_b, o_rows)[:, None]
                            pv = warpgroup_mma(gl.convert_layout(p_b, p_op_layout), k_s.index(sb * 2 + 1), acc,
                                               is_async=True)
                            l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                            m_i = m_b
                            mbarrier.wait(got_pa, ph)
                            pv = warpgroup_mma(kr_s.index(sa), k_s.index(sa * 2 + 1), pv, is_async=True)
                        else:
                            acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
                            l_i = l_i * scale_a + rs_a
                            m_i = m_a
                            mbarrier.wait(got_pa, ph)
                            pv = warpgroup_mma(kr_s.index(sa), k_s.index(sa * 2 + 1), acc, is_async=True)
                        acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                    if C == 1:
                        mbarrier.arrive(k_empty.index(sa))
                        if has_b:
                            mbarrier.arrive(k_empty.index(sb))
                    c += 1 + has_b.to(gl.int32)
                    pairs_b += has_b.to(gl.int32)
                    pairs += 1
                if C == 1:
                    mbarrier.arrive(q_empty)
                pieces += 1

            has = l_i > 0.0
            m_use = _no_inf(m_i)
            l_safe = gl.where(has, l_i, 1.0)
            lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
            # the tile's rows: the sequence's query rows t * 64 + r (token, head), those of its tokens written
            rows = t * BLOCK_M + gl.arange(0, BLOCK_M, row_layout)
            rows_ok = rows < num_q * num_heads
            heads = rows % num_heads
            # the sink joins the denominator of whole sequences (without one, sink_ptr is any float32 buffer of H
            # values, loaded and dropped: a compile-time branch here failed to compile with Triton 3.6)
            sink = gl.where(whole & HAS_SINK, gl.load(sink_ptr + heads) * LOG2E, float("-inf"))
            denom = l_safe + gl.exp2(sink - m_use)
            inv = gl.where(has, 1.0 / denom, 0.0)
            out = acc * gl.convert_layout(inv, o_rows)[:, None]
            r = t * BLOCK_M + gl.arange(0, BLOCK_M, o_rows)
            r_ok = (r < num_q * num_heads)[:, None]
            d = COLS * C + gl.arange(0, COLS, gl.SliceLayout(0, o_layout))
            if TMA_OUT:
                _stage_and_store(C, out, whole, q_s, k_s, out_desc, po_desc, q_empty, c0_done, c1_stored, pieces,
                                 epis, (row_start * num_heads + t * BLOCK_M).to(gl.int32),
                                 ((2 * w + (b != first_seq).to(gl.int32)) * (stride_po_s // stride_po_r)
                                  + t * BLOCK_M).to(gl.int32))
            if whole:
                if not TMA_OUT:
                    o_row = ((row_start + r // num_heads).to(gl.int64) * stride_o_t
                             + (r % num_heads).to(gl.int64) * stride_o_h)
                    gl.store(out_ptr + o_row[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty), mask=r_ok)
                if C == 0:
                    gl.store(lse_ptr + (row_start + rows // num_heads).to(gl.int64) * stride_lse_t
                             + heads * stride_lse_h, lse, mask=rows_ok)
            else:
                slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
                if not TMA_OUT:
                    # L2 policy evict_last: see `mla_sparse_decode_ring._store_rows`
                    gl.store(part_out_ptr + slot * stride_po_s + r.to(gl.int64)[:, None] * stride_po_r + d[None, :],
                             out, mask=r_ok, eviction_policy="evict_last")
                if C == 0:
                    gl.store(part_lse_ptr + slot * stride_pl_s + rows, lse, mask=rows_ok, eviction_policy="evict_last")
            epis += 1


# like `_mla_decode_kernel`: no recompile when a size becomes 1 or changes its divisibility by 16 (a multi-second
# compile in the middle of serving, or inside a CUDA-graph capture)
@gluon.jit(do_not_specialize=["batch", "num_heads", "num_tiles", "mask_code", "window", "page_size",
                              "page_rows", "layer_row0"])
def _mla_decode_ws_kernel(
    q_desc, qr_desc, k_desc, kr_desc, out_ptr, lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, schedule_ptr,
    sink_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc,
    batch, num_heads, num_tiles, mask_code, window, qk_scale, page_size, page_rows, layer_row0,
    stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
    HAS_SINK: gl.constexpr, CONSUMER_REGS: gl.constexpr, TMA_OUT: gl.constexpr,
):
    """Program (worker w, row tile t), as `_mla_decode_kernel`. The cache is read through `k_desc` / `kr_desc`,
    2-D views `[rows, 576]` of the cache in which page p's slot s of this layer is row
    `p * page_rows + layer_row0 + s`."""
    pid = gl.program_id(0)
    w = pid // num_tiles
    t = pid % num_tiles

    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_M, COLS], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_ROPE], qr_desc.layout)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_N, COLS], k_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, D_ROPE], kr_desc.layout)
    stats = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    one = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = one.index(0)
    q_empty = one.index(1)
    got_a = one.index(2)
    got_b = one.index(3)
    got_pa = one.index(4)
    stats_free = one.index(5)
    c0_done = one.index(6)
    c1_stored = one.index(7)
    # one arrival on each: consumer 1 releases q and ring slots to consumer 0, which issues the copies
    for i in gl.static_range(8):
        mbarrier.init(one.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=1)
    fence_async_shared()

    # two partitions of one warpgroup each: a third (a loader warp) would cap every thread at 168 registers,
    # and the consumers' accumulators need more (ptxas then serializes the logits' MMAs)
    gl.warp_specialize([
        (_consumer, (0, q_desc, qr_desc, k_desc, kr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, q_empty, k_ready,
                    k_empty, got_a, got_b, got_pa, stats_free, schedule_ptr, offsets_ptr, cache_lengths_ptr,
                    lookup_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc, c0_done,
                    c1_stored, w, t, batch, num_heads, mask_code, window, qk_scale, page_size, page_rows,
                    layer_row0, stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s,
                    stride_po_r, stride_pl_s, HAS_SINK, TMA_OUT)),
        (_consumer, (1, q_desc, qr_desc, k_desc, kr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, q_empty, k_ready,
                    k_empty, got_a, got_b, got_pa, stats_free, schedule_ptr, offsets_ptr, cache_lengths_ptr,
                    lookup_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc, c0_done,
                    c1_stored, w, t, batch, num_heads, mask_code, window, qk_scale, page_size, page_rows,
                    layer_row0, stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s,
                    stride_po_r, stride_pl_s, HAS_SINK, TMA_OUT)),
    ], [4], [CONSUMER_REGS])
