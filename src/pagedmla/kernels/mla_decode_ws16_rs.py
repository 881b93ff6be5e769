"""Warp-specialized dense MLA decode for Hopper, in Gluon, for tiles of up to 16 query rows over the rope-aware
FP8 cache, with the e4m3 values widened in registers ("register operands"): the sibling of
`pagedmla.kernels.mla_decode_ws16`, which widens each block into a bf16 copy in shared memory on warps of its own.

Why. In `mla_decode_ws16` the widen warps write every block to shared memory as bf16 and both MMAs read that copy;
the kernel takes 75-80 us at 16 heads B64 N4096 where its copies alone take 49, bound by the two partitions
running together (BENCHMARKS.md, twenty-first session). Here nothing is written to shared memory but P: each
consumer loads the ring's e4m3 bytes itself, widens them with the native conversion (`cvt.rn.f16x2.e4m3x2`,
exact) and feeds fp16 register-operand warpgroup MMAs. H200, 16 heads, one token (BENCHMARKS.md, twenty-third
session): the harness's B64 N4096 55.9 us and B128 N4096 95.8 (bf16 81.7 and 150.9; the widen kernel about 79 and
144 in graph replays); slower when pieces are short (B1 N16384 19.8 against 13.6, B64 N1024 33.6 against 29.0):
each piece starts with q widened to fp16 and ends with a merge of the consumers, and a block's dependency chain
is long (the time follows the consumers' instructions: BENCHMARKS.md, twenty-third session, rs_ablate.py).
The plan's `long_pieces` picks it for long pieces only (`ops._triton_decode.ws16_use_registers`).

Layout of the work, as in `mla_decode_ws16` (S^T = K q^T and O^T = V^T P^T, keys and output columns on the MMAs'
64-row side, up to 16 query rows on their N side), with three partitions:
- loader (1 warp): `mla_decode_ws16._loader` with `SPLIT_LATENT`: each half's latent in four 128-byte-wide boxes
  swizzled by 128 bytes (`_sw128_i32`), so that the consumers' loads hit every bank once per phase (without the
  swizzle: 84 against 73 us at B64);
- consumers 0 (the default 4 warps) and 1 (4 warps): block c of a worker (counted over its pieces) goes to
  consumer c % 2, in ring slot pair c % (SLOTS / 2); each has its own online softmax (the lazy one of
  `mla_decode_ws16`) and its own P. Consumer 1 widens each piece's q to fp16 for both, into one of two buffers
  (`q16_ready`, `q16_empty`: the next piece's q is widened while consumer 0 still reads this one's); when
  consumer 0 widened its own copy, its start took 3-5 us where consumer 1's took under 1 and held the ring up
  (BENCHMARKS.md, twenty-fifth session). At a piece's end consumer 1, if it had a block of the piece, hands
  (m, l, O) to consumer 0 through shared memory (`merge_full`, `merge_empty`), which merges and writes the rows
  or the piece's partial.

The operands are built without moving data between the loads and the MMAs (only loads, byte permutes and
conversions in between; checked in the SASS by `benchmarks/experiments/rs_operand_probe.py`):
- logits: a thread loads 16-byte units 2t and 2t + 1 of its rows' 128-byte chunk row; the K axis is permuted
  instead of the data (operand column k = 64 g + 16 s + 8 h + 2 t + e is byte 32 t + 16 g + 4 s + 2 h + e), and q
  is stored in that order, as fp16 times 2^e per row (`_q_scale`: bf16's 8 significant bits fit fp16's 11);
- P @ V: a thread loads one 4-byte word of each of its four keys per 16-key step and pairs keys 2kp, 2kp + 1
  byte by byte; row m = 64 a + 16 w + 8 h + r of an output chunk is dim 32 w + 4 r + 2 a + h
  (`mla_decode_ws16._store_chunk` undoes it);
- P^T is stored as fp16 p * scale = 2^(s + log2 |scale| - m) (signed), the running maximum m taken over
  s + max(log2 |scale|, -64) (the floor keeps m finite for rows whose keys have zero scales): P stays below 2^8
  whatever the scales, with no check of its own (the twenty-second session's kernel kept a power of two g per
  piece and checked each block's largest scale against it: 6-7% of the time, BENCHMARKS.md, twenty-third
  session); l sums 2^(s - m).

Ordering across proxies: each consumer reads a ring slot with ordinary loads and the loader's next TMA copy
writes it through the async proxy, so the consumer fences the async proxy and synchronizes its warps before it
releases the slot (`tests/test_launch_order.py` checks the compiled kernel).

Ring phases: with SLOTS / 2 = 3 pairs a pair's previous block is the other consumer's, so before its k_ready
parity waits a consumer waits for that block's release (k_empty): while the previous copies are in flight the
parity wait would match the phase before. Without it the kernel failed about once in 400 harness runs (a warp
illegal instruction at the loader's expect; `tests/test_ws16_rs_ring_protocol.py` models the protocol).

Compiled for sm_90 only; tested in the gpu tier against the reference (both FP8 16-row kernels run every ws16
case). Softmax in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernel in natural log.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .gluon_common import D_ROPE, opaque_zero, wait_for_prior_grid
from .mla_decode_ws import _no_inf, _piece
from .mla_decode_ws16 import (
    BLOCK_N,
    CHUNK,
    HALF,
    N_CHUNKS,
    RESCALE_LOG2,
    ROWS,
    _acc_layout,
    _bf16_tile,
    _finish_piece,
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


# log2 |scale| floor of the softmax's running maximum (see the consumer): P = 2^(s + log2 |sc| - m) stays below
# 2^8 for any scale, and s - m at most 64 + 8 (l, which sums 2^(s - m) in float32, has room to spare)
MIN_LOG2_SCALE = gl.constexpr(64.0)


@gluon.constexpr_function
def _dot_a():
    return gl.DotOperandLayout(operand_index=0, parent=_acc_layout(), k_width=2)


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
def _q_chunk_f16(q_s, q16_s, ch: gl.constexpr, dst, up):
    """q's latent chunk ch (bf16, `q_s`) as fp16 times `up` (2^e per row) into `q16_s` chunk dst, its columns in
    `_k_operand`'s order."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    x = q_s.index(ch).load(layout).to(gl.float32) * gl.convert_layout(up, gl.SliceLayout(1, layout))[:, None]
    x = x.reshape([ROWS, 4, 2, 4, 2, 2])  # byte 32 t + 16 g + 4 s + 2 h + e
    q16_s.index(dst).store(gl.permute(x, (0, 2, 3, 4, 1, 5)).reshape([ROWS, CHUNK]).to(gl.float16))


@gluon.constexpr_function
def _v_words():
    """A chunk's words `[64 keys, 32]` as P @ V's operand loads them: thread (warp w, lane 4 r + t) holds keys
    16 s + 2 t, + 1, + 8, + 9 (s = 0..3) of word 8 w + r."""
    return gl.DistributedLinearLayout(reg_bases=[[1, 0], [8, 0], [16, 0], [32, 0]],
                                      lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
                                      warp_bases=[[0, 8], [0, 16]], block_bases=[], shape=[64, 32])


@gluon.jit
def _v_operand(words):
    """P @ V's operand V^T `[128 rows, 64 keys]` fp16 from a chunk's words (`_v_words`), rows relabeled (row
    64 a + 16 w + 8 h + r is dim 32 w + 4 r + 2 a + h)."""
    ev, od = words.reshape([32, 2, 32]).permute((0, 2, 1)).split()  # keys 2 kp and 2 kp + 1
    d0e, d0o, d1e, d1o, d2e, d2o, d3e, d3o = gl.inline_asm_elementwise(
        E4M3_PAIRS_TO_F16, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [ev, od], dtype=(gl.float16,) * 8, is_pure=True, pack=1)
    t = gl.join(gl.join(gl.join(d0e, d0o), gl.join(d1e, d1o)), gl.join(gl.join(d2e, d2o), gl.join(d3e, d3o)))
    t = t.permute((0, 1, 4, 3, 2))  # (kp, word, jhi, jlo, e): dim 4 word + 2 jhi + jlo, key 2 kp + e
    t = t.reshape([4, 2, 4, 4, 8, 2, 2, 2])  # (s, hk, tt, w, r, a, h, e): kp = 8 s + 4 hk + tt, word = 8 w + r
    t = gl.permute(t, (5, 3, 6, 4, 0, 1, 2, 7))  # rows (a, w, h, r), keys (s, hk, tt, e)
    return gl.convert_layout(t.reshape([128, 64]), _dot_a())


@gluon.jit
def _chunk_v_words(raw_s, box, k0, lo, hi, EDGE: gl.constexpr):
    """A latent chunk's words as P @ V loads them (`_v_words`); in an EDGE block (one with keys outside the
    piece's [lo, hi)) those keys' words zeroed: the native conversion keeps an e4m3 NaN a NaN (a poisoned unused
    slot), and their P of 0 times NaN would be NaN in the MMA. Interior blocks skip the compares and selects
    (about a hundred instructions a block and thread)."""
    words = raw_s.index(box).load(_v_words())
    if EDGE:
        key = k0 + gl.arange(0, BLOCK_N, gl.SliceLayout(1, _v_words()))
        words = gl.where(((key >= lo) & (key < hi))[:, None], words, 0)
    return words


@gluon.jit
def _p_at_v(raw_s, pr, pt, o0, o1, o2, o3, k0, lo, hi, EDGE: gl.constexpr):
    """O^T += V^T P^T over a block's four latent chunks (ring slot pair pr), each chunk's operand built while
    the previous chunk's MMA runs."""
    v0 = _v_operand(_chunk_v_words(raw_s, 4 * pr + 0, k0, lo, hi, EDGE))
    o0 = warpgroup_mma(v0, pt, o0, is_async=True)
    v1 = _v_operand(_chunk_v_words(raw_s, 4 * pr + 1, k0, lo, hi, EDGE))
    o1 = warpgroup_mma(v1, pt, o1, is_async=True)
    o0, v0 = warpgroup_mma_wait(num_outstanding=1, deps=(o0, v0))
    v2 = _v_operand(_chunk_v_words(raw_s, 4 * pr + 2, k0, lo, hi, EDGE))
    o2 = warpgroup_mma(v2, pt, o2, is_async=True)
    o1, v1 = warpgroup_mma_wait(num_outstanding=1, deps=(o1, v1))
    v3 = _v_operand(_chunk_v_words(raw_s, 4 * pr + 3, k0, lo, hi, EDGE))
    o3 = warpgroup_mma(v3, pt, o3, is_async=True)
    o2, o3, v2, v3 = warpgroup_mma_wait(num_outstanding=0, deps=(o2, o3, v2, v3))
    return o0, o1, o2, o3


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
def _store_p(p_s, s_p, m, sgn):
    """P^T = 2^(s + log2 |scale| - m) sgn(scale) (`s_p` = s + log2 |scale|, keys x rows) into `p_s` as fp16."""
    p_s.store(gl.permute((gl.exp2(s_p - m[None, :]) * sgn).to(gl.float16), (1, 0)))


@gluon.constexpr_function
def _handover_smem():
    """Consumer 1's O^T chunks `[128, 16]` float32 for consumer 0, in the accumulator's layout: 8 bytes of rows
    r .. r + 3 in a half-warp's access; rows 64 bytes apart put rows r and r + 2 on the same banks (a two-way
    conflict), so 32 bytes of padding follow every two rows."""
    return gl.PaddedSharedLayout.with_identity_for([[2 * ROWS, 8]], [CHUNK, ROWS], [1, 0])


@gluon.constexpr_function
def _vector_smem():
    return gl.SwizzledSharedLayout(1, 1, 1, [0])


@gluon.jit
def _consumer(q_s, qr_s, q16_s, qrp_s, qd_s, raw_s, rr_s, sc_s, p_s, red_s, ox_s, stat_s, q_ready, q_empty, q16_ready,
              q16_empty, k_ready, k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr,
              sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale,
              stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK:
              gl.constexpr, SLOTS: gl.constexpr, WG: gl.constexpr):
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
            l_cols = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
            o0 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o1 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o2 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            o3 = gl.zeros([CHUNK, ROWS], gl.float32, acc2)
            if n_blocks > 0:
                # consumer 1 widens q into the piece's buffer qb (of two: the next piece's q is widened while
                # consumer 0 still reads this one) for both; consumer 0 waits for it (widening it itself took
                # consumer 0 3-5 us at a piece's start where consumer 1 took under 1, and held the ring up:
                # BENCHMARKS.md, twenty-fifth session)
                qb = pieces % 2
                if WG == 1:
                    # the buffer's previous piece (pieces - 2) released by consumer 0
                    mbarrier.wait(q16_empty.index(qb), ((pieces // 2) & 1) ^ 1)
                    mbarrier.wait(q_ready, pieces & 1)
                    up, down = _q_scale(q_s, col_l)
                    for ch in gl.static_range(N_CHUNKS):
                        _q_chunk_f16(q_s, q16_s, ch, qb * N_CHUNKS + ch, up)
                    qrp_s.index(qb).store(qr_s.load(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])))
                    qd_s.index(qb).store(down)
                    fence_async_shared()
                    gl.thread_barrier()
                    mbarrier.arrive(q16_ready.index(qb))
                    # q_s and qr_s may take the next piece's q
                    mbarrier.arrive(q_empty)
                else:
                    mbarrier.wait(q16_ready.index(qb), (pieces // 2) & 1)
                    down = qd_s.index(qb).load(col_l)
                qk_lat = down * qk_scale
                pieces += 1
                for i in range((c0 + WG) % 2, n_blocks, 2):
                    c = c0 + i
                    pr = c % (SLOTS // 2)
                    rb = (c // 2) % 2  # this consumer's blocks alternate the maxima buffers
                    k0 = k_lo + i * BLOCK_N
                    dyn = qb * N_CHUNKS + opaque_zero(c)
                    # the pair's previous block (c - SLOTS / 2: the other consumer's, SLOTS / 2 being odd) must
                    # have been released first: while its copies are in flight, k_ready is a phase behind and
                    # the parity wait below would pass at once on the phase before (reading a stale slot,
                    # releasing it, and letting the loader arrive on a phase with no arrival pending: a "warp
                    # illegal instruction" at its expect, BENCHMARKS.md, twenty-fourth session)
                    mbarrier.wait(k_empty.index((2 * c) % SLOTS), (((2 * c) // SLOTS) & 1) ^ 1)
                    mbarrier.wait(k_empty.index((2 * c + 1) % SLOTS), (((2 * c + 1) // SLOTS) & 1) ^ 1)
                    mbarrier.wait(k_ready.index((2 * c) % SLOTS), ((2 * c) // SLOTS) & 1)
                    mbarrier.wait(k_ready.index((2 * c + 1) % SLOTS), ((2 * c + 1) // SLOTS) & 1)
                    a_rope = rope_pairs.index(pr).load(_dot_a())
                    s_rope = warpgroup_mma(a_rope, qrp_s.index(qb).permute((1, 0)),
                                           gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
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
                    # P carries the keys' scales (V is the raw e4m3): P = p sc = 2^(s + log2 |sc| - m) sgn(sc), so
                    # the running maximum m is kept over s + log2 |sc|, which bounds P below 2^RESCALE_LOG2 in
                    # fp16 whatever the scales; l sums p = 2^(s - m). A zero scale (a key outside the piece, whose
                    # scale the loader zero-fills, or a zero row) gives P = 0. The maximum floors log2 |sc| at
                    # -MIN_LOG2_SCALE: a row whose keys so far all have zero scales (finite s) still gets a finite
                    # m, so that its l keeps its weight in later rescales and in the consumers' merge.
                    lsc = gl.log2(gl.abs(sc))
                    s_p = s + lsc[:, None]
                    s_m = s + gl.maximum(lsc, -MIN_LOG2_SCALE)[:, None]
                    sgn = gl.where(sc < 0.0, -1.0, 1.0)[:, None]
                    red_s.index(rb).store(gl.max(gl.reshape(s_m, [4, 16, ROWS]), axis=1))
                    _store_p(p_s, s_p, _no_inf(m_i), sgn)
                    fence_async_shared()
                    gl.thread_barrier()
                    blk_max = gl.convert_layout(gl.max(red_s.index(rb).load(_red_layout()), axis=0), col_l)
                    redo = blk_max > m_i + RESCALE_LOG2
                    if gl.max(redo.to(gl.int32), axis=0) > 0:
                        # P of a piece's first block (m = -inf) is stored again here
                        m_new = gl.maximum(m_i, blk_max)
                        m_safe = _no_inf(m_new)
                        alpha = gl.exp2(m_i - m_safe)
                        l_cols = l_cols * alpha[None, :]
                        alpha_o = gl.convert_layout(alpha, ocol_l)
                        o0 = o0 * alpha_o[None, :]
                        o1 = o1 * alpha_o[None, :]
                        o2 = o2 * alpha_o[None, :]
                        o3 = o3 * alpha_o[None, :]
                        m_i = m_new
                        _store_p(p_s, s_p, m_safe, sgn)
                        fence_async_shared()
                        gl.thread_barrier()
                    l_cols = l_cols + gl.exp2(s - _no_inf(m_i)[None, :])
                    pt = p_s.permute((1, 0))
                    if (k0 < lo) | (k0 + BLOCK_N > hi):
                        o0, o1, o2, o3 = _p_at_v(raw_s, pr, pt, o0, o1, o2, o3, k0, lo, hi, True)
                    else:
                        o0, o1, o2, o3 = _p_at_v(raw_s, pr, pt, o0, o1, o2, o3, k0, lo, hi, False)
                    fence_async_shared()
                    gl.thread_barrier()
                    mbarrier.arrive(k_empty.index((2 * c) % SLOTS))
                    mbarrier.arrive(k_empty.index((2 * c + 1) % SLOTS))
                if WG == 0:
                    # q's buffer back to consumer 1 once every warp is done with it: past its last MMA (each block
                    # waits for its MMAs) and its read of qd_s (a piece whose only block is consumer 1's has no
                    # block barrier in this consumer)
                    gl.thread_barrier()
                    mbarrier.arrive(q16_empty.index(qb))
            l_i = gl.sum(l_cols, axis=0)
            if WG == 1:
                if other_has:
                    # hand (m, l, O) to consumer 0 once it has read the previous piece's
                    mbarrier.wait(merge_empty, (merges & 1) ^ 1)
                    stat_s.index(0).store(m_i)
                    stat_s.index(1).store(l_i)
                    ox_s[0].store(o0)
                    ox_s[1].store(o1)
                    ox_s[2].store(o2)
                    ox_s[3].store(o3)
                    gl.thread_barrier()
                    mbarrier.arrive(merge_full)
                    merges += 1
            else:
                # O merged with consumer 1's
                m_x = gl.full([ROWS], float("-inf"), gl.float32, col_l)
                l_x = gl.zeros([ROWS], gl.float32, col_l)
                if other_has:
                    mbarrier.wait(merge_full, merges & 1)
                    m_x = stat_s.index(0).load(col_l)
                    l_x = stat_s.index(1).load(col_l)
                m = gl.maximum(m_i, m_x)
                m_use = _no_inf(m)
                a_own = gl.exp2(m_i - m_use)
                a_x = gl.exp2(m_x - m_use)
                l_i = l_i * a_own + l_x * a_x
                f_own = gl.convert_layout(a_own, ocol_l)
                o0 = o0 * f_own[None, :]
                o1 = o1 * f_own[None, :]
                o2 = o2 * f_own[None, :]
                o3 = o3 * f_own[None, :]
                if other_has:
                    f_x = gl.convert_layout(a_x, ocol_l)
                    o0 = o0 + ox_s[0].load(acc2) * f_x[None, :]
                    o1 = o1 + ox_s[1].load(acc2) * f_x[None, :]
                    o2 = o2 + ox_s[2].load(acc2) * f_x[None, :]
                    o3 = o3 + ox_s[3].load(acc2) * f_x[None, :]
                    gl.thread_barrier()
                    mbarrier.arrive(merge_empty)
                    merges += 1
                _finish_piece(o0, o1, o2, o3, m, l_i, whole, b, first_seq, w, row_start, num_q, num_heads, sink_ptr,
                              out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, stride_o_t, stride_o_h, stride_lse_t,
                              stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, col_l, HAS_SINK, True)
        c0 += n_blocks


@gluon.jit(do_not_specialize=["batch", "num_heads", "mask_code", "window", "page_size", "page_rows", "layer_row0"])
def _mla_decode_ws16_rs_kernel(
    q_desc, qr_desc, lat_desc, rope_desc, out_ptr, lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr,
    batch, num_heads, mask_code, window, qk_scale, page_size, page_rows, layer_row0, s_layer_off,
    stride_lt_b, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
    stride_s_b, stride_s_s,
    HAS_SINK: gl.constexpr, SLOTS: gl.constexpr, CONSUMER_REGS: gl.constexpr, LOADER_REGS: gl.constexpr,
):
    """`mla_decode_ws16`'s kernel's arguments (`ops._triton_decode._launch_ws16` launches both), the ring boxes
    `[32, 32]` int32 swizzled by 128 bytes (`_sw128_i32`); CONSUMER_REGS: consumer 1's registers (consumer 0
    gets what the other two partitions leave)."""
    gl.static_assert(SLOTS % 2 == 0, "the ring needs an even number of slots")
    w = gl.program_id(0)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [N_CHUNKS, ROWS, CHUNK], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    # q as the MMAs read it (fp16 latent chunks, bf16 rope, the rows' 2^-e), two pieces' worth
    q16_s = gl.allocate_shared_memory(gl.float16, [2 * N_CHUNKS, ROWS, CHUNK], _bf16_tile())
    qrp_s = gl.allocate_shared_memory(gl.bfloat16, [2, ROWS, D_ROPE], qr_desc.layout)
    qd_s = gl.allocate_shared_memory(gl.float32, [2, ROWS], _vector_smem())
    raw_s = gl.allocate_shared_memory(gl.int32, [SLOTS // 2 * N_CHUNKS, BLOCK_N, CHUNK // 4], _sw128_i32())
    rr_s = gl.allocate_shared_memory(gl.int32, [SLOTS // 2, BLOCK_N, D_ROPE // 2], _sw128_i32())
    sc_s = gl.allocate_shared_memory(gl.float32, [SLOTS, HALF], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    p_a = gl.allocate_shared_memory(gl.float16, [ROWS, BLOCK_N], _bf16_tile())
    p_b = gl.allocate_shared_memory(gl.float16, [ROWS, BLOCK_N], _bf16_tile())
    red_a = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    red_b = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    # one buffer a chunk (a padded layout has no views of a 3-D buffer's chunks)
    ox_s = (gl.allocate_shared_memory(gl.float32, [CHUNK, ROWS], _handover_smem()),
            gl.allocate_shared_memory(gl.float32, [CHUNK, ROWS], _handover_smem()),
            gl.allocate_shared_memory(gl.float32, [CHUNK, ROWS], _handover_smem()),
            gl.allocate_shared_memory(gl.float32, [CHUNK, ROWS], _handover_smem()))
    stat_s = gl.allocate_shared_memory(gl.float32, [2, ROWS], _vector_smem())
    k_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    qb = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    q_ready = qb.index(0)
    q_empty = qb.index(1)
    merge_full = qb.index(2)
    merge_empty = qb.index(3)
    q16_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q16_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(SLOTS):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(q16_ready.index(i), count=1)
        mbarrier.init(q16_empty.index(i), count=1)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=1)
    mbarrier.init(merge_full, count=1)
    mbarrier.init(merge_empty, count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (q_s, qr_s, q16_s, qrp_s, qd_s, raw_s, rr_s, sc_s, p_a, red_a, ox_s, stat_s, q_ready, q_empty,
                     q16_ready, q16_empty, k_ready, k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr,
                     cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, w, batch, num_heads,
                     mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s,
                     stride_po_r, stride_pl_s, HAS_SINK, SLOTS, 0)),
        (_consumer, (q_s, qr_s, q16_s, qrp_s, qd_s, raw_s, rr_s, sc_s, p_b, red_b, ox_s, stat_s, q_ready, q_empty,
                     q16_ready, q16_empty, k_ready, k_empty, merge_full, merge_empty, schedule_ptr, offsets_ptr,
                     cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, w, batch, num_heads,
                     mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s,
                     stride_po_r, stride_pl_s, HAS_SINK, SLOTS, 1)),
        (_loader, (q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
                   k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch,
                   num_heads, mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b,
                   stride_s_s, stride_lt_b, SLOTS, True)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


