"""EXPERIMENT: `ws16_rs.py`'s register-operand FP8 decode with two consumer warpgroups taking alternate blocks
("ping-pong"), each with its own online softmax, merged at the end of each piece.

Why (BENCHMARKS.md, twenty-second session): `ws16_rs.py` is right on every ws16 gpu test but 27% slower than the
shipped kernel (B64 N4096 99.6 against 78.2 us): its one warpgroup runs each block's loads, conversions, MMAs and
softmax one after another, about 3.2 us a block where the copies need 1.6. Two warpgroups overlap one's
conversions and softmax with the other's.

Partitions: consumer 0 (the default 4 warps), consumer 1 (4 warps, `WIDEN_REGS` registers: the launcher's
argument, reused), the loader (1 warp, the shipped kernel's `_loader`). Block c of a worker (counted over its
pieces) goes to consumer c % 2, in ring slot pair c % (SLOTS / 2). Each consumer widens q into its own fp16 copy,
so q's barrier `q_empty` counts two arrivals. At a piece's end consumer 1 (if it had a block of the piece) hands
its (m, l, g, O) to consumer 0 through shared memory (`merge_full`, `merge_empty`); consumer 0 merges and writes.

    PYTHONPATH=src python3 benchmarks/experiments/ws16_pp.py        # compile for sm_90a (no GPU needed)
    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws16_pp.py --time 64,4096 128,4096 1,16384
"""

from __future__ import annotations

import pathlib
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ws16_rs import (
    E4M3X4_TO_F16,
    _dot_a,
    _pow2_below,
    _q_scale,
    _store_chunks,
    _store_p,
    _v_operand,
    _v_words,
)

from pagedmla.kernels.gluon_common import D_LAT, D_ROPE, LN2, LOG2E, opaque_zero, wait_for_prior_grid
from pagedmla.kernels.mla_decode_ws import _no_inf, _piece
from pagedmla.kernels.mla_decode_ws16 import (
    BLOCK_N,
    CHUNK,
    ENTRIES,
    HALF,
    N_CHUNKS,
    RESCALE_LOG2,
    ROWS,
    _acc_layout,
    _bf16_tile,
    _entry_layout,
    _red_layout,
    _span,
    _table_entries,
)


@gluon.constexpr_function
def _sw128_i32():
    """The ring's tiles: int32 rows of 128 bytes (a 32-column latent chunk, or the rope), swizzled in 16-byte
    units by the row's index mod 8: the loads below then hit every bank once per phase."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)


@gluon.constexpr_function
def _k_words():
    """A chunk's words `[64 keys, 32]` as the logits' operand loads them: thread (warp w, lane 4 r + t) holds rows
    16 w + r and 16 w + r + 8, words 8 t .. 8 t + 7 (16-byte units 2 t and 2 t + 1). In a phase of a 16-byte load
    (lanes 8 i .. 8 i + 7: rows 2 i and 2 i + 1) the units 2 t of rows differing in their low bit land on all
    eight units of the swizzled row pair: no bank is hit twice."""
    return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0], [0, 4]],
                                      lane_bases=[[0, 8], [0, 16], [1, 0], [2, 0], [4, 0]],
                                      warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 32])


@gluon.jit
def _k_operand(words):
    """The logits' operand `[64, 128]` fp16 from a chunk's words (`_k_words`): operand column
    k = 64 g + 16 s + 8 h + 2 t + e is byte 32 t + 16 g + 4 s + 2 h + e of the 128-byte chunk."""
    b0, b1, b2, b3 = gl.inline_asm_elementwise(E4M3X4_TO_F16, "=h,=h,=h,=h,r", [words], dtype=(gl.float16,) * 4,
                                               is_pure=True, pack=1)
    # word 8 t + 4 g + s, byte 4 word + 2 h + e (a join's new index is the last dimension: e joined last)
    phys = gl.join(gl.join(b0, b2), gl.join(b1, b3)).reshape([64, 4, 2, 4, 2, 2])  # (row, t, g, s, h, e)
    return gl.convert_layout(gl.permute(phys, (0, 2, 3, 4, 1, 5)).reshape([64, 128]), _dot_a())


@gluon.jit
def _q_chunk_f16(q_s, q16_s, ch: gl.constexpr, up):
    """q's latent chunk ch (bf16, `q_s`) as fp16 times `up` (2^e per row) into `q16_s` chunk ch, its columns in
    `_k_operand`'s order."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    x = q_s.index(ch).load(layout).to(gl.float32) * gl.convert_layout(up, gl.SliceLayout(1, layout))[:, None]
    x = x.reshape([ROWS, 4, 2, 4, 2, 2])  # byte 32 t + 16 g + 4 s + 2 h + e
    q16_s.index(ch).store(gl.permute(x, (0, 2, 3, 4, 1, 5)).reshape([ROWS, CHUNK]).to(gl.float16))


@gluon.jit
def _loader(q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
            k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch, num_heads,
            mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b, stride_s_s, stride_lt_b,
            SLOTS: gl.constexpr):
    """The shipped kernel's loader, but each half's latent in four 128-byte-wide swizzled boxes: slot st is half
    st % 2 of pair st // 2, whose chunk ch is `raw_s.index(4 * (st // 2) + ch)` `[64, 32]`."""
    sc_layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    wait_for_prior_grid(w)
    first_seq, last_seq = _span(schedule_ptr, w, batch)
    c = 0
    pieces = 0
    for b in range(first_seq, last_seq + 1):
        _active, _whole, lo, hi, k_lo, n_blocks, row_start, _num_q, _lo_r, _hi_r, _lo_max, _hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, 0, num_heads, mask_code, window, sc_layout, ROWS)
        if n_blocks > 0:
            lookup_row = lookup_ptr + b.to(gl.int64) * stride_lt_b
            mbarrier.wait(q_empty, (pieces & 1) ^ 1)
            mbarrier.expect(q_ready, N_CHUNKS * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
            q_row = row_start * num_heads
            for ch in gl.static_range(N_CHUNKS):
                tma.async_copy_global_to_shared(q_desc, [q_row, CHUNK * ch], q_ready, q_s.index(ch))
            tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)
            pieces += 1
            nxt = _table_entries(lookup_row, k_lo, hi, page_size, 0, n_blocks)
            for g in range(0, n_blocks, ENTRIES):
                entries = nxt
                nxt = _table_entries(lookup_row, k_lo, hi, page_size, g + ENTRIES, n_blocks)
                for i in range(g, gl.minimum(g + ENTRIES, n_blocks)):
                    page = gl.sum(gl.where(gl.arange(0, ENTRIES, _entry_layout()) == i - g, entries, 0), axis=0)
                    k0 = k_lo + i * BLOCK_N
                    for h in gl.static_range(2):
                        n = 2 * c + h
                        st = n % SLOTS
                        kh = k0 + h * HALF
                        mbarrier.wait(k_empty.index(st), ((n // SLOTS) & 1) ^ 1)
                        keys = kh + gl.arange(0, HALF, sc_layout)
                        slot = kh % page_size + gl.arange(0, HALF, sc_layout)
                        s_ptr = (scales_ptr + page.to(gl.int64) * stride_s_b + s_layer_off
                                 + slot.to(gl.int64) * stride_s_s)
                        async_copy.async_copy_global_to_shared(sc_s.index(st), s_ptr, mask=(keys >= lo) & (keys < hi))
                        async_copy.mbarrier_arrive(k_ready.index(st))
                        bar = k_ready.index(st)
                        mbarrier.expect(bar, N_CHUNKS * lat_desc.block_type.nbytes + rope_desc.block_type.nbytes)
                        row = page * page_rows + layer_row0 + kh % page_size
                        for ch in gl.static_range(N_CHUNKS):
                            tma.async_copy_global_to_shared(lat_desc, [row, ch * CHUNK // 4], bar,
                                                            raw_s.index(4 * (st // 2) + ch).slice(h * HALF, HALF))
                        tma.async_copy_global_to_shared(rope_desc, [row, D_LAT // 4], bar,
                                                        rr_s.index(st // 2).slice(h * HALF, HALF))
                    c += 1


@gluon.constexpr_function
def _plain2():
    return gl.SwizzledSharedLayout(1, 1, 1, [0])


@gluon.jit
def _consumer(q_s, qr_s, q16_s, qrp_s, raw_s, rr_s, sc_s, p_s, red_s, scm_s, ox_s, stat_s, q_ready, q_empty, k_ready,
              k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr,
              lse_ptr, part_out_ptr, part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale, stride_o_t,
              stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK: gl.constexpr,
              SLOTS: gl.constexpr, WG: gl.constexpr):
    layout: gl.constexpr = _acc_layout()
    col_l: gl.constexpr = gl.SliceLayout(0, layout)
    key_l: gl.constexpr = gl.SliceLayout(1, layout)
    acc2: gl.constexpr = _acc_layout()  # also the [128, 16] output chunks'
    ocol_l: gl.constexpr = gl.SliceLayout(0, acc2)
    rope_pairs = rr_s._reinterpret(gl.bfloat16, [SLOTS // 2, BLOCK_N, D_ROPE], _bf16_tile())
    sc_pairs = sc_s._reinterpret(gl.float32, [SLOTS // 2, BLOCK_N], sc_s.layout)
    wait_for_prior_grid(w)
    first_seq, last_seq = _span(schedule_ptr, w, batch)
    c0 = 0  # blocks of the worker's earlier pieces
    pieces = 0
    merges = 0
    for b in range(first_seq, last_seq + 1):
        active, whole, lo, hi, k_lo, n_blocks, row_start, num_q, lo_r, hi_r, lo_max, hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, 0, num_heads, mask_code, window, col_l, ROWS)
        # consumer 1 has a block of this piece (then it hands its state over)
        other_has = (n_blocks >= 2) | ((n_blocks == 1) & (c0 % 2 == 1))
        if active:
            m_i = gl.full([ROWS], float("-inf"), gl.float32, col_l)
            g_i = gl.zeros([ROWS], gl.float32, col_l)
            l_cols = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
            o0 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o1 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o2 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o3 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            if n_blocks > 0:
                mbarrier.wait(q_ready, pieces & 1)
                up, down = _q_scale(q_s, col_l)
                for ch in gl.static_range(N_CHUNKS):
                    _q_chunk_f16(q_s, q16_s, ch, up)
                qrp_s.store(qr_s.load(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])))
                qk_lat = down * qk_scale
                fence_async_shared()
                gl.thread_barrier()
                # q is in this consumer's own buffers: one of q_empty's two arrivals
                mbarrier.arrive(q_empty)
                pieces += 1
                for i in range((c0 + WG) % 2, n_blocks, 2):
                    c = c0 + i
                    pr = c % (SLOTS // 2)
                    rb = (c // 2) % 2  # this consumer's blocks alternate the maxima buffers
                    k0 = k_lo + i * BLOCK_N
                    dyn = opaque_zero(c)
                    mbarrier.wait(k_ready.index((2 * c) % SLOTS), ((2 * c) // SLOTS) & 1)
                    mbarrier.wait(k_ready.index((2 * c + 1) % SLOTS), ((2 * c + 1) // SLOTS) & 1)
                    a_rope = rope_pairs.index(pr).load(_dot_a())
                    s_rope = warpgroup_mma(a_rope, qrp_s.permute((1, 0)), gl.zeros([BLOCK_N, ROWS], gl.float32, layout),
                                           use_acc=False, is_async=True)
                    a_0 = _k_operand(raw_s.index(4 * pr + 0).load(_k_words()))
                    s_lat = warpgroup_mma(a_0, q16_s.index(dyn).permute((1, 0)),
                                          gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
                    a_1 = _k_operand(raw_s.index(4 * pr + 1).load(_k_words()))
                    s_lat = warpgroup_mma(a_1, q16_s.index(1 + dyn).permute((1, 0)), s_lat, is_async=True)
                    s_rope, a_rope, a_0 = warpgroup_mma_wait(num_outstanding=1, deps=(s_rope, a_rope, a_0))
                    a_2 = _k_operand(raw_s.index(4 * pr + 2).load(_k_words()))
                    s_lat = warpgroup_mma(a_2, q16_s.index(2 + dyn).permute((1, 0)), s_lat, is_async=True)
                    a_1 = warpgroup_mma_wait(num_outstanding=1, deps=(a_1,))
                    a_3 = _k_operand(raw_s.index(4 * pr + 3).load(_k_words()))
                    s_lat = warpgroup_mma(a_3, q16_s.index(3 + dyn).permute((1, 0)), s_lat, is_async=True)
                    sc = sc_pairs.index(pr).load(key_l)
                    s_lat, a_2, a_3 = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, a_2, a_3))
                    s = s_lat * sc[:, None] * qk_lat[None, :] + s_rope * qk_scale
                    if (k0 < lo_max) | (k0 + BLOCK_N > hi_min):
                        j = k0 + gl.arange(0, BLOCK_N, key_l)
                        s = gl.where((j[:, None] >= lo_r[None, :]) & (j[:, None] < hi_r[None, :]), s, float("-inf"))
                    red_s.index(rb).store(gl.max(gl.reshape(s, [4, 16, ROWS]), axis=1))
                    sc_abs = gl.reshape(gl.abs(sc), [4, 16])
                    scm_s.index(rb).store(gl.zeros_like(sc_abs) + gl.max(sc_abs, axis=1)[:, None])
                    p = gl.exp2(s - _no_inf(m_i)[None, :])
                    _store_p(p_s, p, sc, g_i)
                    fence_async_shared()
                    gl.thread_barrier()
                    blk_max = gl.convert_layout(gl.max(red_s.index(rb).load(_red_layout()), axis=0), col_l)
                    f = _pow2_below(gl.convert_layout(gl.max(scm_s.index(rb).load(_red_layout()), axis=0), col_l))
                    redo = (blk_max > m_i + RESCALE_LOG2) | (f > 16.0 * g_i)
                    if gl.max(redo.to(gl.int32), axis=0) > 0:
                        m_new = gl.maximum(m_i, blk_max)
                        m_safe = _no_inf(m_new)
                        alpha = gl.exp2(m_i - m_safe)
                        p = gl.exp2(s - m_safe[None, :])
                        l_cols = l_cols * alpha[None, :]
                        g_new = gl.maximum(g_i, f)
                        alpha_o = gl.convert_layout(alpha * (g_i / g_new), ocol_l)
                        o0 = o0 * alpha_o[None, :]
                        o1 = o1 * alpha_o[None, :]
                        o2 = o2 * alpha_o[None, :]
                        o3 = o3 * alpha_o[None, :]
                        m_i = m_new
                        g_i = g_new
                        _store_p(p_s, p, sc, g_i)
                        fence_async_shared()
                        gl.thread_barrier()
                    l_cols = l_cols + p
                    pt = p_s.permute((1, 0))
                    v_key = k0 + gl.arange(0, BLOCK_N, gl.SliceLayout(1, _v_words()))
                    v_ok = (v_key >= lo) & (v_key < hi)
                    v0 = _v_operand(raw_s.index(4 * pr + 0).load(_v_words()), v_ok)
                    o0 = warpgroup_mma(v0, pt, o0, is_async=True)
                    v1 = _v_operand(raw_s.index(4 * pr + 1).load(_v_words()), v_ok)
                    o1 = warpgroup_mma(v1, pt, o1, is_async=True)
                    o0, v0 = warpgroup_mma_wait(num_outstanding=1, deps=(o0, v0))
                    v2 = _v_operand(raw_s.index(4 * pr + 2).load(_v_words()), v_ok)
                    o2 = warpgroup_mma(v2, pt, o2, is_async=True)
                    o1, v1 = warpgroup_mma_wait(num_outstanding=1, deps=(o1, v1))
                    v3 = _v_operand(raw_s.index(4 * pr + 3).load(_v_words()), v_ok)
                    o3 = warpgroup_mma(v3, pt, o3, is_async=True)
                    o2, o3, v2, v3 = warpgroup_mma_wait(num_outstanding=0, deps=(o2, o3, v2, v3))
                    fence_async_shared()
                    gl.thread_barrier()
                    mbarrier.arrive(k_empty.index((2 * c) % SLOTS))
                    mbarrier.arrive(k_empty.index((2 * c + 1) % SLOTS))
            l_i = gl.sum(l_cols, axis=0)
            if WG == 1:
                if other_has:
                    # hand (m, l, g, O) to consumer 0 once it has read the previous piece's
                    mbarrier.wait(merge_empty, (merges & 1) ^ 1)
                    stat_s.index(0).store(m_i)
                    stat_s.index(1).store(l_i)
                    stat_s.index(2).store(g_i)
                    ox_s.index(0).store(o0)
                    ox_s.index(1).store(o1)
                    ox_s.index(2).store(o2)
                    ox_s.index(3).store(o3)
                    gl.thread_barrier()
                    mbarrier.arrive(merge_full)
                    merges += 1
            else:
                # O in true units (P was stored divided by g), merged with consumer 1's
                m_x = gl.full([ROWS], float("-inf"), gl.float32, col_l)
                l_x = gl.zeros([ROWS], gl.float32, col_l)
                g_x = gl.zeros([ROWS], gl.float32, col_l)
                if other_has:
                    mbarrier.wait(merge_full, merges & 1)
                    m_x = stat_s.index(0).load(col_l)
                    l_x = stat_s.index(1).load(col_l)
                    g_x = stat_s.index(2).load(col_l)
                m = gl.maximum(m_i, m_x)
                m_use = _no_inf(m)
                a_own = gl.exp2(m_i - m_use)
                a_x = gl.exp2(m_x - m_use)
                l_i = l_i * a_own + l_x * a_x
                f_own = gl.convert_layout(a_own * g_i, ocol_l)
                o0 = o0 * f_own[None, :]
                o1 = o1 * f_own[None, :]
                o2 = o2 * f_own[None, :]
                o3 = o3 * f_own[None, :]
                if other_has:
                    f_x = gl.convert_layout(a_x * g_x, ocol_l)
                    o0 = o0 + ox_s.index(0).load(acc2) * f_x[None, :]
                    o1 = o1 + ox_s.index(1).load(acc2) * f_x[None, :]
                    o2 = o2 + ox_s.index(2).load(acc2) * f_x[None, :]
                    o3 = o3 + ox_s.index(3).load(acc2) * f_x[None, :]
                    gl.thread_barrier()
                    mbarrier.arrive(merge_empty)
                    merges += 1
                has = l_i > 0.0
                l_safe = gl.where(has, l_i, 1.0)
                lse = gl.where(has, (m + gl.log2(l_safe)) * LN2, float("-inf"))
                rows = gl.arange(0, ROWS, col_l)
                rows_ok = rows < num_q * num_heads
                heads = rows % num_heads
                sink = gl.where(whole & HAS_SINK, gl.load(sink_ptr + heads, mask=rows_ok, other=0.0) * LOG2E,
                                float("-inf"))
                if whole:
                    inv = gl.where(has, 1.0 / (l_safe + gl.exp2(sink - m_use)), 0.0)
                    o_row = (row_start + rows // num_heads).to(gl.int64) * stride_o_t + heads.to(gl.int64) * stride_o_h
                    _store_chunks(out_ptr, o_row, o0, o1, o2, o3, inv, rows_ok, False)
                    gl.store(lse_ptr + (row_start + rows // num_heads).to(gl.int64) * stride_lse_t
                             + heads.to(gl.int64) * stride_lse_h, lse, mask=rows_ok)
                else:
                    slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
                    inv = gl.where(has, 1.0 / l_safe, 0.0)
                    _store_chunks(part_out_ptr, slot * stride_po_s + rows.to(gl.int64) * stride_po_r, o0, o1, o2, o3,
                                  inv, rows_ok, True)
                    gl.store(part_lse_ptr + slot * stride_pl_s + rows, lse, mask=rows_ok, eviction_policy="evict_last")
        c0 += n_blocks


@gluon.jit(do_not_specialize=["batch", "num_heads", "mask_code", "window", "page_size", "page_rows", "layer_row0"])
def _mla_decode_ws16_kernel(
    q_desc, qr_desc, lat_desc, rope_desc, out_ptr, lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr,
    batch, num_heads, mask_code, window, qk_scale, page_size, page_rows, layer_row0, s_layer_off,
    stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
    stride_s_b, stride_s_s,
    HAS_SINK: gl.constexpr, SLOTS: gl.constexpr, WIDEN_WARPS: gl.constexpr, WIDEN_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
):
    """The shipped kernel's signature (`ops._triton_decode._launch_ws16` launches it; WIDEN_REGS: consumer 1's
    registers; WIDEN_WARPS unused)."""
    gl.static_assert(SLOTS % 2 == 0, "the ring needs an even number of slots")
    w = gl.program_id(0)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [N_CHUNKS, ROWS, CHUNK], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    q16_a = gl.allocate_shared_memory(gl.float16, [N_CHUNKS, ROWS, CHUNK], _bf16_tile())
    q16_b = gl.allocate_shared_memory(gl.float16, [N_CHUNKS, ROWS, CHUNK], _bf16_tile())
    qrp_a = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    qrp_b = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    raw_s = gl.allocate_shared_memory(gl.int32, [SLOTS // 2 * N_CHUNKS, BLOCK_N, CHUNK // 4], _sw128_i32())
    rr_s = gl.allocate_shared_memory(gl.int32, [SLOTS // 2, BLOCK_N, D_ROPE // 2], _sw128_i32())
    sc_s = gl.allocate_shared_memory(gl.float32, [SLOTS, HALF], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    p_a = gl.allocate_shared_memory(gl.float16, [ROWS, BLOCK_N], _bf16_tile())
    p_b = gl.allocate_shared_memory(gl.float16, [ROWS, BLOCK_N], _bf16_tile())
    red_a = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red_b = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    scm_a = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    scm_b = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    ox_s = gl.allocate_shared_memory(gl.float32, [N_CHUNKS, CHUNK, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    stat_s = gl.allocate_shared_memory(gl.float32, [3, ROWS], _plain2())
    k_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    qb = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    q_ready = qb.index(0)
    q_empty = qb.index(1)
    merge_full = qb.index(2)
    merge_empty = qb.index(3)
    for i in gl.static_range(SLOTS):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=1)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=2)
    mbarrier.init(merge_full, count=1)
    mbarrier.init(merge_empty, count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (q_s, qr_s, q16_a, qrp_a, raw_s, rr_s, sc_s, p_a, red_a, scm_a, ox_s, stat_s, q_ready, q_empty,
                     k_ready, k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                     part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t,
                     stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK, SLOTS, 0)),
        (_consumer, (q_s, qr_s, q16_b, qrp_b, raw_s, rr_s, sc_s, p_b, red_b, scm_b, ox_s, stat_s, q_ready, q_empty,
                     k_ready, k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                     part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t,
                     stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK, SLOTS, 1)),
        (_loader, (q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
                   k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch,
                   num_heads, mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b,
                   stride_s_s, stride_lt_b, SLOTS)),
    ], [4, 1], [WIDEN_REGS, LOADER_REGS])


CONSUMER_REGS = 232
LOADER_REGS = 24


class _SwizzledRing:
    """Stands in for the launcher's `GluonTensorDescriptor`: the ring's int32 boxes (`[32, 128]` latent, `[32, 32]`
    rope, unswizzled) become `[32, 32]` boxes swizzled by 128 bytes (`_sw128_i32`); the others pass through."""

    @staticmethod
    def from_tensor(x, block, layout):
        import torch
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
        if x.dtype == torch.int32:
            block, layout = [32, 32], gl.NVMMASharedLayout(128, 32, 2)  # HALF rows, CHUNK / 4 words
        return TensorDescriptor.from_tensor(x, block, layout)


def install(slots: int = 6, consumer_regs: int = CONSUMER_REGS, loader_regs: int = LOADER_REGS) -> None:
    """Swap this kernel into the launcher (`_triton_decode._mla_decode_ws16_kernel`) with an even ring."""
    from pagedmla.ops import _triton_decode
    _triton_decode._mla_decode_ws16_kernel = _mla_decode_ws16_kernel
    _triton_decode.GluonTensorDescriptor = _SwizzledRing
    _triton_decode.WS16_SLOTS = slots
    _triton_decode.WS16_WIDEN_REGS = consumer_regs
    _triton_decode.WS16_LOADER_REGS = loader_regs


def compile_offline(slots: int, consumer_regs: int, loader_regs: int, dump: str | None = None):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
    import cases_sm90
    import compile_sm90
    _fn, types, const, warps, stages = cases_sm90.CASES["decode-ws16"]()
    const = dict(const, SLOTS=slots, WIDEN_REGS=consumer_regs, LOADER_REGS=loader_regs)
    k = compile_sm90.compile_kernel(_mla_decode_ws16_kernel, types, const, warps, stages)
    if dump:
        for ext in ("ttgir", "ptx"):
            pathlib.Path(f"{dump}.{ext}").write_text(k.asm[ext])
        pathlib.Path(f"{dump}.cubin").write_bytes(k.asm["cubin"])
    print(f"slots {slots} regs {consumer_regs}/{loader_regs}: {k.metadata.shared} bytes of shared memory |",
          compile_sm90._ptxas_usage(k.asm["ptx"]))
    return k


def time_against_shipped(cases: list[str], variants: list[tuple[int, int, int]], repeat: int) -> None:
    """CUDA-graph replays (decode_probe's cases: 16 heads, one token, FP8, one worker per SM): the shipped kernel,
    then this one per (slots, consumer registers, loader registers), in one process; each line with the first
    sequence's max error against the float32 reference."""
    import dataclasses

    import torch
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from decode_probe import Case, _time_graph

    from pagedmla.configs.decode import WS16
    from pagedmla.ops import _triton_decode
    names = ("_mla_decode_ws16_kernel", "WS16_SLOTS", "WS16_WIDEN_REGS", "WS16_LOADER_REGS", "GluonTensorDescriptor")
    shipped = [getattr(_triton_decode, n) for n in names]
    workers = torch.cuda.get_device_properties(0).multi_processor_count
    for text in cases:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        plan = case.plan(workers)
        for _ in range(repeat):
            for v in [None, *variants]:
                name = "shipped" if v is None else f"ping-pong slots {v[0]} regs {v[1]}/{v[2]}"
                if v is not None:
                    install(*v)
                try:
                    err = case.check(plan, dataclasses.replace(WS16))
                    us = _time_graph(case.run(plan, dataclasses.replace(WS16))) * 1e3 / case.copies
                    print(f"B{b} N{n} W{workers} {name}: {us:.1f} us err {err:.2e}", flush=True)
                finally:
                    for nm, val in zip(names, shipped):
                        setattr(_triton_decode, nm, val)


VARIANTS = [(6, 232, 24), (6, 216, 40), (4, 232, 24)]


def check_indices() -> None:
    """`_k_operand`'s and `_q_chunk_f16`'s column order in torch: the product of the permuted operands is the
    plain one."""
    import torch
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=gen, dtype=torch.float64)
    q = torch.randn(16, 128, generator=gen, dtype=torch.float64)
    b = x.reshape(64, 32, 4).unbind(-1)  # the four bytes of each word

    def join(u, v):
        return torch.stack([u, v], dim=-1)
    a = join(join(b[0], b[2]), join(b[1], b[3])).reshape(64, 4, 2, 4, 2, 2).permute(0, 2, 3, 4, 1, 5).reshape(64, 128)
    q16 = q.reshape(16, 4, 2, 4, 2, 2).permute(0, 2, 3, 4, 1, 5).reshape(16, 128)
    assert torch.allclose(a @ q16.T, x @ q.T), "logits operand"
    print("index algebra: ok")


def main() -> None:
    if "--check-indices" in sys.argv:
        check_indices()
        return
    if "--time" in sys.argv:
        repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 2
        variants = VARIANTS[:1] if "--one" in sys.argv else VARIANTS
        time_against_shipped([a for a in sys.argv[1:] if "," in a] or ["64,4096"], variants, repeat=repeat)
        return
    dump = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
    for v in VARIANTS:
        compile_offline(*v, dump=dump)


if __name__ == "__main__":
    main()
