"""DRAFT, never run on a GPU: the 16-row FP8 decode without the widened copy (`pagedmla.kernels.mla_decode_ws16`'s
design minus its widen warps), for the next session to test and time. What is known of it: it compiles for
sm_90a (no spills), its operands' index algebra checks out in torch (`--check-indices`), and a static review of
its TTGIR, PTX and SASS found no bug (BENCHMARKS.md, twenty-first session). Nothing else.

Why (BENCHMARKS.md, twenty-first session): in the shipped kernel the widen warps write every block to shared
memory as bf16 (W) and both MMAs read W; the copies alone take 49 us at 16 heads B64 N4096 and the kernel 75, and
neither partition alone is the bound, their running together is. Here the MMA warps read the ring's e4m3 bytes
themselves and widen them in registers to fp16 MMA operands (register-operand warpgroup MMAs), so nothing is
written to shared memory but P. How the operands are built without moving data is what
`rs_operand_probe.py` checks:
- logits, S^T = K q^T (keys as rows): a thread loads 16 consecutive bytes per row and 64-byte group; the
  operand's column k = 64 g + 16 s + 8 h + 2 t + e is byte 64 g + 16 t + 4 s + 2 h + e of the 128-byte chunk,
  and q is stored (as fp16 times 2^e per row) in that order (`_q_chunk_f16`);
- P @ V, O^T = V^T P^T (dims as rows): a thread loads one 4-byte word of each of its four keys per 16-key step
  and pairs keys 2kp, 2kp + 1 byte by byte; row m = 64 a + 16 w + 8 h + r of an output chunk is its dim
  32 w + 4 r + 2 a + h (`_store_chunk` undoes it).
P^T is stored as fp16 P * scale / g, g a power of two near the piece's largest key scale (raised, with O
rescaled, when a block's scales pass 16 g), as in commit a765cb4's fp16 variant; the softmax is the shipped
kernel's lazy one, with the blocks' largest scales exchanged at the same barrier.

Partitions: the loader (1 warp, the shipped kernel's `_loader`: halves of 32 rows into SLOTS ring slots; SLOTS
must be even, so that a block's two halves are adjacent and the MMA warps read them as one 64-row slot pair) and
the MMA warps (4). Not done: two consumer warpgroups (conversion overlapping MMAs), a swizzled ring (the loads
here have bank conflicts). Its piece loop, epilogue and allocations copy the shipped kernel's on purpose: if it
works it replaces that kernel's partitions in `src/`, and the copies go.

    PYTHONPATH=src python3 benchmarks/experiments/ws16_rs.py            # compile for sm_90a (no GPU needed)
    PYTHONPATH=src python3 benchmarks/experiments/ws16_rs.py --check-indices   # the index algebra, in torch
    # on a GPU: the ws16 gpu tests and the stress script against it, then its time against the shipped kernel
    PYTHONPATH=src python3 -c "import sys; sys.path.insert(0, 'benchmarks/experiments'); import ws16_rs; \
        ws16_rs.install(); import pytest; pytest.main(['-q', '-m', 'gpu', 'tests/test_decode_triton.py', '-k', 'ws16'])"
    PYTHONPATH=src python3 -c "import sys, runpy; sys.path.insert(0, 'benchmarks/experiments'); import ws16_rs; \
        ws16_rs.install(); sys.argv = ['ws16_stress.py', '--reps', '1']; \
        runpy.run_path('benchmarks/experiments/ws16_stress.py', run_name='__main__')"
    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws16_rs.py --time 64,4096 128,4096 1,16384
"""

from __future__ import annotations

import pathlib
import sys

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from pagedmla.kernels.gluon_common import D_LAT, D_ROPE, LN2, LOG2E, opaque_zero, wait_for_prior_grid
from pagedmla.kernels.mla_decode_ws import _no_inf, _piece
from pagedmla.kernels.mla_decode_ws16 import (
    BLOCK_N,
    CHUNK,
    HALF,
    N_CHUNKS,
    RESCALE_LOG2,
    ROWS,
    _acc_layout,
    _bf16_tile,
    _loader,
    _red_layout,
    _span,
)

# four e4m3 bytes ($4) -> four fp16 values (bytes 0..3), the native conversion (exact)
E4M3X4_TO_F16 = gl.constexpr("""
        {
        .reg .b16 lo, hi;
        .reg .b32 a, b;
        mov.b32 {lo, hi}, $4;
        cvt.rn.f16x2.e4m3x2 a, lo;
        cvt.rn.f16x2.e4m3x2 b, hi;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        }
""")

# two words of four e4m3 bytes, of keys k ($8) and k + 1 ($9) -> for each byte j, (key k, key k + 1) as fp16
E4M3_PAIRS_TO_F16 = gl.constexpr("""
        {
        .reg .b32 lo, hi, a, b, c, d;
        .reg .b16 l0, l1, h0, h1;
        prmt.b32 lo, $8, $9, 0x5140;
        prmt.b32 hi, $8, $9, 0x7362;
        mov.b32 {l0, l1}, lo;
        mov.b32 {h0, h1}, hi;
        cvt.rn.f16x2.e4m3x2 a, l0;
        cvt.rn.f16x2.e4m3x2 b, l1;
        cvt.rn.f16x2.e4m3x2 c, h0;
        cvt.rn.f16x2.e4m3x2 d, h1;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        mov.b32 {$4, $5}, c;
        mov.b32 {$6, $7}, d;
        }
""")


@gluon.constexpr_function
def _dot_a():
    return gl.DotOperandLayout(operand_index=0, parent=_acc_layout(), k_width=2)


@gluon.constexpr_function
def _k_words():
    """A chunk's words `[64 keys, 32]` as the logits' operand loads them: thread (warp w, lane 4 r + t) holds rows
    16 w + r and 16 w + r + 8, words 4 t .. 4 t + 3 and 16 + 4 t .. 16 + 4 t + 3."""
    return gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0], [0, 16]],
                                      lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                      warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 32])


@gluon.constexpr_function
def _v_words():
    """A chunk's words `[64 keys, 32]` as P @ V's operand loads them: thread (warp w, lane 4 r + t) holds keys
    16 s + 2 t, + 1, + 8, + 9 (s = 0..3) of word 8 w + r."""
    return gl.DistributedLinearLayout(reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]],
                                      lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
                                      warp_bases=[[0, 8], [0, 16]], block_bases=[], shape=[64, 32])


@gluon.jit
def _k_operand(words):
    """The logits' operand `[64, 128]` fp16 from a chunk's words (`_k_words`), columns in the permuted order."""
    b0, b1, b2, b3 = gl.inline_asm_elementwise(E4M3X4_TO_F16, "=h,=h,=h,=h,r", [words], dtype=(gl.float16,) * 4,
                                               is_pure=True, pack=1)
    # (row, word, h, e) with byte 4 word + 2 h + e: a join's new index is the last dimension, so the low bit (e)
    # is joined last
    phys = gl.join(gl.join(b0, b2), gl.join(b1, b3)).reshape([64, 2, 4, 4, 2, 2])  # (row, g, t, s, h, e)
    return gl.convert_layout(gl.permute(phys, (0, 1, 3, 4, 2, 5)).reshape([64, 128]), _dot_a())


@gluon.jit
def _v_operand(words, ok):
    """P @ V's operand V^T `[128 rows, 64 keys]` fp16 from a chunk's words (`_v_words`), rows relabeled (row
    64 a + 16 w + 8 h + r is dim 32 w + 4 r + 2 a + h). Keys outside the piece (`ok` false, in
    `SliceLayout(1, _v_words())`) are zeroed: the native conversion keeps an e4m3 NaN a NaN (a poisoned unused
    slot), and their P of 0 times NaN would be NaN in the MMA."""
    words = gl.where(ok[:, None], words, 0)
    ev, od = words.reshape([32, 2, 32]).permute((0, 2, 1)).split()  # keys 2 kp and 2 kp + 1
    d0e, d0o, d1e, d1o, d2e, d2o, d3e, d3o = gl.inline_asm_elementwise(
        E4M3_PAIRS_TO_F16, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [ev, od], dtype=(gl.float16,) * 8, is_pure=True, pack=1)
    t = gl.join(gl.join(gl.join(d0e, d0o), gl.join(d1e, d1o)), gl.join(gl.join(d2e, d2o), gl.join(d3e, d3o)))
    t = t.permute((0, 1, 4, 3, 2))  # (kp, word, jhi, jlo, e): dim 4 word + 2 jhi + jlo, key 2 kp + e
    t = t.reshape([4, 2, 4, 4, 8, 2, 2, 2])  # (s, hk, tt, w, r, a, h, e): kp = 8 s + 4 hk + tt, word = 8 w + r
    t = gl.permute(t, (5, 3, 6, 4, 0, 1, 2, 7))  # rows (a, w, h, r), keys (s, hk, tt, e)
    return gl.convert_layout(t.reshape([128, 64]), _dot_a())


@gluon.jit
def _q_chunk_f16(q_s, q16_s, ch: gl.constexpr, up):
    """q's latent chunk ch (bf16, `q_s`) as fp16 times `up` (2^e per row) into `q16_s` chunk ch, its columns in
    `_k_operand`'s order."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    x = q_s.index(ch).load(layout).to(gl.float32) * gl.convert_layout(up, gl.SliceLayout(1, layout))[:, None]
    x = x.reshape([ROWS, 2, 4, 4, 2, 2])  # byte 64 g + 16 t + 4 s + 2 h + e
    q16_s.index(ch).store(gl.permute(x, (0, 1, 3, 4, 2, 5)).reshape([ROWS, CHUNK]).to(gl.float16))


@gluon.jit
def _q_scale(q_s, col_l: gl.constexpr):
    """(2^e, 2^-e) per row of q's latent, e placing the row's largest magnitude in [2^14, 2^15) (a zero row:
    e = 126): bf16's 8 significant bits fit fp16's 11 down to 2^-17 of it."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    amax = gl.max(gl.abs(q_s.index(0).load(layout).to(gl.float32)), axis=1)
    for ch in gl.static_range(1, N_CHUNKS):
        amax = gl.maximum(amax, gl.max(gl.abs(q_s.index(ch).load(layout).to(gl.float32)), axis=1))
    biased = (amax.to(gl.int32, bitcast=True) >> 23) & 0xFF
    e = gl.minimum(gl.maximum(141 - biased, -126), 126)
    up = ((e + 127) << 23).to(gl.float32, bitcast=True)
    down = ((127 - e) << 23).to(gl.float32, bitcast=True)
    return gl.convert_layout(up, col_l), gl.convert_layout(down, col_l)


@gluon.jit
def _pow2_below(x):
    """2^floor(log2 x) of float32 values x (2^-126 for 0 or a subnormal: a block of zero scales must not raise
    g, which never comes down within a piece)."""
    p = (x.to(gl.int32, bitcast=True) & 0x7F800000).to(gl.float32, bitcast=True)
    return gl.where(p == 0.0, 1.1754943508222875e-38, p)


@gluon.jit
def _store_p(p_s, p, sc, g_i):
    # g_i is 0 before a piece's first block, whose P the redo path stores again (a finite value here all the same)
    v = p * sc[:, None] * (1.0 / gl.maximum(g_i, 1.1754943508222875e-38))[None, :]
    p_s.store(gl.permute(v.to(gl.float16), (1, 0)))


@gluon.jit
def _mma_warps(q_s, qr_s, q16_s, qrp_s, raw_s, rr_s, sc_s, p_s, red_s, scm_s, q_ready, q_empty, k_ready, k_empty,
               schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr,
               w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h,
               stride_po_s, stride_po_r, stride_pl_s, HAS_SINK: gl.constexpr, SLOTS: gl.constexpr):
    layout: gl.constexpr = _acc_layout()
    col_l: gl.constexpr = gl.SliceLayout(0, layout)
    key_l: gl.constexpr = gl.SliceLayout(1, layout)
    acc2: gl.constexpr = _acc_layout()  # also the [128, 16] output chunks'
    # a block's two halves (ring slots 2c, 2c + 1 mod SLOTS) as one pair of 64 rows
    pairs = raw_s._reinterpret(gl.int32, [SLOTS // 2, BLOCK_N, D_LAT // 4], raw_s.layout)
    rope_pairs = rr_s._reinterpret(gl.bfloat16, [SLOTS // 2, BLOCK_N, D_ROPE], rr_s.layout)
    sc_pairs = sc_s._reinterpret(gl.float32, [SLOTS // 2, BLOCK_N], sc_s.layout)
    wait_for_prior_grid(w)
    first_seq, last_seq = _span(schedule_ptr, w, batch)
    c = 0
    pieces = 0
    for b in range(first_seq, last_seq + 1):
        active, whole, lo, hi, k_lo, n_blocks, row_start, num_q, lo_r, hi_r, lo_max, hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, 0, num_heads, mask_code, window, col_l, ROWS)
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
                # q is in the MMA warps' own buffers (q16_s, qrp_s): the loader may bring the next piece's
                mbarrier.arrive(q_empty)
                pieces += 1
                for i in range(n_blocks):
                    pr = c % (SLOTS // 2)
                    k0 = k_lo + i * BLOCK_N
                    dyn = opaque_zero(c)
                    mbarrier.wait(k_ready.index((2 * c) % SLOTS), ((2 * c) // SLOTS) & 1)
                    mbarrier.wait(k_ready.index((2 * c + 1) % SLOTS), ((2 * c + 1) // SLOTS) & 1)
                    a_rope = rope_pairs.index(pr).load(_dot_a())
                    s_rope = warpgroup_mma(a_rope, qrp_s.permute((1, 0)), gl.zeros([BLOCK_N, ROWS], gl.float32, layout),
                                           use_acc=False, is_async=True)
                    # each chunk's operand is widened while the MMAs before it run. An operand's registers must
                    # not change until its MMA is done: each is a dependency of the first wait that sees its MMA
                    # done (MMAs complete in order, so a wait for "at most one outstanding" issued after the next
                    # MMA covers the one before)
                    a_0 = _k_operand(pairs.index(pr).slice(0, CHUNK // 4, dim=1).load(_k_words()))
                    s_lat = warpgroup_mma(a_0, q16_s.index(dyn).permute((1, 0)),
                                          gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
                    a_1 = _k_operand(pairs.index(pr).slice(CHUNK // 4, CHUNK // 4, dim=1).load(_k_words()))
                    s_lat = warpgroup_mma(a_1, q16_s.index(1 + dyn).permute((1, 0)), s_lat, is_async=True)
                    s_rope, a_rope, a_0 = warpgroup_mma_wait(num_outstanding=1, deps=(s_rope, a_rope, a_0))
                    a_2 = _k_operand(pairs.index(pr).slice(2 * CHUNK // 4, CHUNK // 4, dim=1).load(_k_words()))
                    s_lat = warpgroup_mma(a_2, q16_s.index(2 + dyn).permute((1, 0)), s_lat, is_async=True)
                    a_1 = warpgroup_mma_wait(num_outstanding=1, deps=(a_1,))
                    a_3 = _k_operand(pairs.index(pr).slice(3 * CHUNK // 4, CHUNK // 4, dim=1).load(_k_words()))
                    s_lat = warpgroup_mma(a_3, q16_s.index(3 + dyn).permute((1, 0)), s_lat, is_async=True)
                    sc = sc_pairs.index(pr).load(key_l)
                    s_lat, a_2, a_3 = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, a_2, a_3))
                    s = s_lat * sc[:, None] * qk_lat[None, :] + s_rope * qk_scale
                    if (k0 < lo_max) | (k0 + BLOCK_N > hi_min):
                        j = k0 + gl.arange(0, BLOCK_N, key_l)
                        s = gl.where((j[:, None] >= lo_r[None, :]) & (j[:, None] < hi_r[None, :]), s, float("-inf"))
                    # the warps' row maxima and largest scales, published at P's barrier (see the shipped kernel)
                    red_s.index(c % 2).store(gl.max(gl.reshape(s, [4, 16, ROWS]), axis=1))
                    sc_abs = gl.reshape(gl.abs(sc), [4, 16])  # the warps' 16 keys each
                    scm_s.index(c % 2).store(gl.zeros_like(sc_abs) + gl.max(sc_abs, axis=1)[:, None])
                    p = gl.exp2(s - _no_inf(m_i)[None, :])
                    _store_p(p_s, p, sc, g_i)
                    fence_async_shared()
                    gl.thread_barrier()
                    blk_max = gl.convert_layout(gl.max(red_s.index(c % 2).load(_red_layout()), axis=0), col_l)
                    f = _pow2_below(gl.convert_layout(gl.max(scm_s.index(c % 2).load(_red_layout()), axis=0), col_l))
                    redo = (blk_max > m_i + RESCALE_LOG2) | (f > 16.0 * g_i)
                    # uniform across the warps (the same shared values, the same m_i and g_i)
                    if gl.max(redo.to(gl.int32), axis=0) > 0:
                        m_new = gl.maximum(m_i, blk_max)
                        m_safe = _no_inf(m_new)
                        alpha = gl.exp2(m_i - m_safe)
                        p = gl.exp2(s - m_safe[None, :])
                        l_cols = l_cols * alpha[None, :]
                        g_new = gl.maximum(g_i, f)
                        alpha_o = gl.convert_layout(alpha * (g_i / g_new), gl.SliceLayout(0, acc2))
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
                    v0 = _v_operand(pairs.index(pr).slice(0, CHUNK // 4, dim=1).load(_v_words()), v_ok)
                    o0 = warpgroup_mma(v0, pt, o0, is_async=True)
                    v1 = _v_operand(pairs.index(pr).slice(CHUNK // 4, CHUNK // 4, dim=1).load(_v_words()), v_ok)
                    o1 = warpgroup_mma(v1, pt, o1, is_async=True)
                    o0, v0 = warpgroup_mma_wait(num_outstanding=1, deps=(o0, v0))
                    v2 = _v_operand(pairs.index(pr).slice(2 * CHUNK // 4, CHUNK // 4, dim=1).load(_v_words()), v_ok)
                    o2 = warpgroup_mma(v2, pt, o2, is_async=True)
                    o1, v1 = warpgroup_mma_wait(num_outstanding=1, deps=(o1, v1))
                    v3 = _v_operand(pairs.index(pr).slice(3 * CHUNK // 4, CHUNK // 4, dim=1).load(_v_words()), v_ok)
                    o3 = warpgroup_mma(v3, pt, o3, is_async=True)
                    o2, o3, v2, v3 = warpgroup_mma_wait(num_outstanding=0, deps=(o2, o3, v2, v3))
                    # the pair's slots back to the loader (its next copies come by TMA, the async proxy)
                    fence_async_shared()
                    gl.thread_barrier()
                    mbarrier.arrive(k_empty.index((2 * c) % SLOTS))
                    mbarrier.arrive(k_empty.index((2 * c + 1) % SLOTS))
                    c += 1

            l_i = gl.sum(l_cols, axis=0)
            has = l_i > 0.0
            m_use = _no_inf(m_i)
            l_safe = gl.where(has, l_i, 1.0)
            lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
            rows = gl.arange(0, ROWS, col_l)
            rows_ok = rows < num_q * num_heads
            heads = rows % num_heads
            sink = gl.where(whole & HAS_SINK, gl.load(sink_ptr + heads, mask=rows_ok, other=0.0) * LOG2E,
                            float("-inf"))
            if whole:
                inv = gl.where(has, g_i / (l_safe + gl.exp2(sink - m_use)), 0.0)
                o_row = (row_start + rows // num_heads).to(gl.int64) * stride_o_t + heads.to(gl.int64) * stride_o_h
                _store_chunks(out_ptr, o_row, o0, o1, o2, o3, inv, rows_ok, False)
                gl.store(lse_ptr + (row_start + rows // num_heads).to(gl.int64) * stride_lse_t
                         + heads.to(gl.int64) * stride_lse_h, lse, mask=rows_ok)
            else:
                slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
                inv = gl.where(has, g_i / l_safe, 0.0)
                _store_chunks(part_out_ptr, slot * stride_po_s + rows.to(gl.int64) * stride_po_r, o0, o1, o2, o3, inv,
                              rows_ok, True)
                gl.store(part_lse_ptr + slot * stride_pl_s + rows, lse, mask=rows_ok, eviction_policy="evict_last")


@gluon.jit
def _store_chunk(ptr, row_off, ch: gl.constexpr, acc, inv, rows_ok, KEEP: gl.constexpr):
    """Output chunk ch (O^T `[128, 16]`, rows relabeled as in `_v_operand`) times `inv` to its columns."""
    layout: gl.constexpr = _acc_layout()
    m = gl.arange(0, CHUNK, gl.SliceLayout(1, layout))
    # m = 64 a + 16 w + 8 h + r -> dim 32 w + 4 r + 2 a + h
    dim = 32 * ((m // 16) % 4) + 4 * (m % 8) + 2 * (m // 64) + (m // 8) % 2
    val = (acc * gl.convert_layout(inv, gl.SliceLayout(0, layout))[None, :]).to(ptr.dtype.element_ty)
    ptrs = ptr + gl.convert_layout(row_off, gl.SliceLayout(0, layout))[None, :] + (ch * CHUNK + dim)[:, None]
    ok = gl.convert_layout(rows_ok, gl.SliceLayout(0, layout))[None, :]
    if KEEP:
        gl.store(ptrs, val, mask=ok, eviction_policy="evict_last")
    else:
        gl.store(ptrs, val, mask=ok)


@gluon.jit
def _store_chunks(ptr, row_off, o0, o1, o2, o3, inv, rows_ok, KEEP: gl.constexpr):
    _store_chunk(ptr, row_off, 0, o0, inv, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 1, o1, inv, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 2, o2, inv, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 3, o3, inv, rows_ok, KEEP)


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
    """The shipped kernel's signature (`ops._triton_decode._launch_ws16` launches it; WIDEN_* unused)."""
    gl.static_assert(SLOTS % 2 == 0, "the ring needs an even number of slots")
    w = gl.program_id(0)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [N_CHUNKS, ROWS, CHUNK], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    q16_s = gl.allocate_shared_memory(gl.float16, [N_CHUNKS, ROWS, CHUNK], _bf16_tile())
    qrp_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    raw_s = gl.allocate_shared_memory(gl.int32, [SLOTS, HALF, D_LAT // 4], lat_desc.layout)
    rr_s = gl.allocate_shared_memory(gl.int32, [SLOTS, HALF, D_ROPE // 2], rope_desc.layout)
    sc_s = gl.allocate_shared_memory(gl.float32, [SLOTS, HALF], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    p_s = gl.allocate_shared_memory(gl.float16, [ROWS, BLOCK_N], _bf16_tile())
    red_s = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    scm_s = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    k_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    qb = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = qb.index(0)
    q_empty = qb.index(1)
    for i in gl.static_range(SLOTS):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=1)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_mma_warps, (q_s, qr_s, q16_s, qrp_s, raw_s, rr_s, sc_s, p_s, red_s, scm_s, q_ready, q_empty, k_ready, k_empty,
                      schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                      part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h,
                      stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK, SLOTS)),
        (_loader, (q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
                   k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch,
                   num_heads, mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b,
                   stride_s_s, stride_lt_b, SLOTS)),
    ], [1], [LOADER_REGS])


def install(slots: int = 4) -> None:
    """Swap this kernel into the launcher (`_triton_decode._mla_decode_ws16_kernel`) with an even ring."""
    from pagedmla.ops import _triton_decode
    _triton_decode._mla_decode_ws16_kernel = _mla_decode_ws16_kernel
    _triton_decode.WS16_SLOTS = slots


def check_indices() -> None:
    """The operands' index algebra on the CPU: the same joins, reshapes and permutes in torch (whose semantics
    the Gluon ops share), on random data, against the plain products. Checks the bookkeeping, not the kernel."""
    import torch
    gen = torch.Generator().manual_seed(0)

    def join(a, b):
        return torch.stack([a, b], dim=-1)
    x, q = torch.randn(64, 128, generator=gen, dtype=torch.float64), torch.randn(16, 128, generator=gen,
                                                                                  dtype=torch.float64)
    b = x.reshape(64, 32, 4).unbind(-1)  # the four bytes of each word
    a = join(join(b[0], b[2]), join(b[1], b[3])).reshape(64, 2, 4, 4, 2, 2).permute(0, 1, 3, 4, 2, 5).reshape(64, 128)
    q16 = q.reshape(16, 2, 4, 4, 2, 2).permute(0, 1, 3, 4, 2, 5).reshape(16, 128)
    assert torch.allclose(a @ q16.T, x @ q.T), "logits operand"
    v, p = torch.randn(64, 128, generator=gen, dtype=torch.float64), torch.randn(64, 16, generator=gen,
                                                                                 dtype=torch.float64)
    wk = v.reshape(32, 2, 32, 4)  # (kp, e, word, byte)
    d = [join(wk[:, 0, :, j], wk[:, 1, :, j]) for j in range(4)]
    t = join(join(d[0], d[1]), join(d[2], d[3])).permute(0, 1, 4, 3, 2).reshape(4, 2, 4, 4, 8, 2, 2, 2)
    vt = t.permute(5, 3, 6, 4, 0, 1, 2, 7).reshape(128, 64)
    m = torch.arange(128)
    dim = 32 * ((m // 16) % 4) + 4 * (m % 8) + 2 * (m // 64) + (m // 8) % 2
    assert sorted(dim.tolist()) == list(range(128)), "row relabeling"
    assert torch.allclose(vt @ p, (v.T @ p)[dim]), "P @ V operand"
    print("index algebra: ok")


def time_against_shipped(cases: list[str], repeat: int) -> None:
    """CUDA-graph replays of decode_probe's cases (16 heads, one token, FP8, one worker per SM): the shipped
    kernel, then this one with rings of 4 and 8 slots (one and three blocks of read-ahead: a block's pair is held
    until its P @ V is done), in one process; each line with the first sequence's max error against the float32
    reference."""
    import dataclasses

    import torch
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from decode_probe import Case, _time_graph

    from pagedmla.configs.decode import WS16
    from pagedmla.ops import _triton_decode
    shipped = (_triton_decode._mla_decode_ws16_kernel, _triton_decode.WS16_SLOTS)
    workers = torch.cuda.get_device_properties(0).multi_processor_count
    for text in cases:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        plan = case.plan(workers)
        for _ in range(repeat):
            for name, slots in (("shipped", 0), ("register operands, 4 slots", 4), ("register operands, 8 slots", 8)):
                if slots:
                    install(slots)
                try:
                    err = case.check(plan, dataclasses.replace(WS16))
                    us = _time_graph(case.run(plan, dataclasses.replace(WS16))) * 1e3 / case.copies
                    print(f"B{b} N{n} W{workers} {name}: {us:.1f} us err {err:.2e}", flush=True)
                finally:
                    _triton_decode._mla_decode_ws16_kernel, _triton_decode.WS16_SLOTS = shipped


def main() -> None:
    if "--check-indices" in sys.argv:
        check_indices()
        return
    if "--time" in sys.argv:
        time_against_shipped([a for a in sys.argv[1:] if "," in a] or ["64,4096"], repeat=2)
        return
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
    import cases_sm90
    import compile_sm90
    _fn, types, const, warps, stages = cases_sm90.CASES["decode-ws16"]()
    const = dict(const, SLOTS=4)
    k = compile_sm90.compile_kernel(_mla_decode_ws16_kernel, types, const, warps, stages)
    print(f"compiled: {k.metadata.shared} bytes of shared memory")


if __name__ == "__main__":
    main()
