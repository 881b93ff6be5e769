"""Warp-specialized dense MLA decode for Hopper, in Gluon, for tiles of up to 16 query rows over the rope-aware
FP8 cache: the logits are computed transposed, keys x rows, so that the warpgroup MMAs' 64 rows are keys.

Why. At 16 heads and one query token a tile has 16 rows, and a warpgroup MMA needs 64: the ring kernel
(`pagedmla.kernels.mla_decode_ring`) uses 16-row `mma.sync` instead, whose operands every warp loads from shared
memory itself. With the FP8 cache each block is also widened from e4m3 to bf16 on the same warps, and the kernel
is bound by those instructions' dependency chains (0.76x of the bf16 decode's speed where its bytes allow
about 1.7x; BENCHMARKS.md). Here S^T = K q^T and O^T = V^T P^T put the keys and the output columns on the MMAs'
64-row side and the 16 query rows on their N side, so the tensor cores read the widened tiles straight from
shared memory, and the widening runs on warps of its own.

Work decomposition: program w is worker w of the split-KV schedule (`pagedmla.kernels.mla_decode`), one tile of
the sequence's up to 16 rows (row = token x H + head), pieces as in `pagedmla.kernels.mla_decode_ws` (64-key
blocks; pages are multiples of 64 slots); one program per SM (225 KB of shared memory). Three partitions:
- loader (1 warp): per piece, q's rows by TMA (once the previous piece's are read); per block, two halves of 32
  rows, each into a slot of a ring of SLOTS slots: the rows' 512 latent and 128 rope bytes by TMA (two boxes of
  whole rows, the rows viewed as int32) and their scales by `cp.async`, all completing the slot's `k_ready`.
  The table entries come 32 blocks per load, one load ahead;
- widen (WIDEN_WARPS warps): each block into one of two W buffers once the MMA warps are done with that
  buffer's previous block (`w_free`): the latent widened exactly to bf16 (`pagedmla.kernels.fp8`'s
  conversion), the rope and the scales copied; each ring slot released as soon as it is read, one `w_ready`
  per block;
- MMA (the default 4 warps): S^T `[64, 16]` = W q_lat^T (scaled by each key's scale) + rope q_rope^T, the
  online softmax down the keys (lazy: see RESCALE_LOG2), P^T (times the keys' scales, since W holds the unscaled
  latent) into shared memory, and O^T `[512, 16]` += W^T P^T in four 128-column chunks, then the buffer back to
  the widen warps. A whole sequence is finished here (sink, normalization), a piece of a split one is written
  with its LSE to the partial slot `2w` or `2w + 1` for `mla_decode._mla_decode_combine_kernel`.

Where the time goes (H200, 16 heads, B64 N4096, BENCHMARKS.md, twenty-first session,
benchmarks/experiments/ws16_ablate.py): about 80 us a call before the widen warps read ahead (75 since). With
the widen warps' work taken out the kernel takes 53 us, with the MMA warps' taken out 52 us, with both 49 us
(the copies alone): neither partition bounds it alone, their running together does (the widen warps are then
busy 2.08 us of each block's 2.18). Why is not established; shared memory, which both use heavily (the widened
copy W is written once and read by both MMAs), is the likely meeting point. fp16 MMAs with the native e4m3
conversion (commit a765cb4, `WS16_F16`) were no faster and are not kept; the exact softmax was 1-2% slower than
the lazy one. A kernel much faster than this one likely needs a design without the widened copy.

Ordering across proxies: the widen warps read each ring slot with ordinary loads and the loader's next TMA copy
writes it through the async proxy, so they fence the async proxy before they release it (the fence also makes
every warp wait for its loads to land before the barrier; without it the slot was released with loads still in
flight). Without that fence one sequence in a run came out wrong now and then on schedules of few workers over
many short sequences (`benchmarks/experiments/ws16_stress.py` finds it; BENCHMARKS.md, twentieth session).
`ops._triton_decode.WS16_ENABLED` switches the kernel off.

A sibling without the widened copy, `mla_decode_ws16_rs` (register operands), runs instead on long pieces
(twenty-third session: B64 N4096 55.9 us in the harness); it shares this module's loader and epilogue.

Compiled for sm_90 only (warpgroup MMAs, TMA); tested in the gpu tier against the reference.
Softmax runs in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernel in natural log.
"""

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

from .fp8 import E4M3X4_TO_BF16_ASM
from .gluon_common import D_LAT, D_ROPE, LN2, LOG2E, opaque_zero, wait_for_prior_grid
from .mla_decode_ws import _no_inf, _piece

ROWS = gl.constexpr(16)  # query rows per tile: the MMAs' N
BLOCK_N = gl.constexpr(64)  # keys per block: the logits MMAs' M
CHUNK = gl.constexpr(128)  # latent columns per widened chunk and per output accumulator
N_CHUNKS = gl.constexpr(4)
HALF = gl.constexpr(32)  # keys per ring slot (a block is two)
ENTRIES = gl.constexpr(32)  # table entries the loader loads at a time


@gluon.constexpr_function
def _acc_layout():
    """Accumulator layout of S^T `[64, 16]` and of the output chunks O^T `[128, 16]` (one warpgroup)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])


@gluon.constexpr_function
def _i32_tile():
    """W and the rope tile as the widen warps write them: int32 pairs of bf16 values, swizzled like `_bf16_tile`
    (the swizzle moves 16-byte units, so both views agree)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=32, rank=2)


@gluon.jit
def _bf16(tile, cols: gl.constexpr):
    """An int32 tile `[64, cols / 2]` of W (or the rope tile) viewed as the bf16 `[64, cols]` the MMAs read."""
    return tile._reinterpret(gl.bfloat16, [BLOCK_N, cols], _bf16_tile())


@gluon.constexpr_function
def _bf16_tile():
    return gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)


# The softmax is lazy. The exact one needs each block's maximum over all 64 keys before P, and the keys are
# spread over the four MMA warps: the reduction across warps cost three barriers and two round trips through
# shared memory between the logits and P @ V. Instead P is computed against the running maxima as they stand,
# the warps publish their own maxima at the one barrier P needs anyway, and a block is redone (with the new
# maxima, O and l rescaled) only when some row's maximum rose more than RESCALE_LOG2 above the running one, or the
# row had none (the piece's first block). P then stays below 2^8: bf16 keeps its relative precision, and the
# float32 sums have room to spare.
RESCALE_LOG2 = gl.constexpr(8.0)


@gluon.constexpr_function
def _red_layout():
    """The `[4, 16]` per-warp row maxima as every thread reads them back: all four warps' values of the thread's
    own four rows (columns of S^T), so that their maximum lands in `SliceLayout(0, _acc_layout())` as it is."""
    return gl.DistributedLinearLayout(reg_bases=[[1, 0], [2, 0], [0, 1], [0, 8]],
                                      lane_bases=[[0, 2], [0, 4], [0, 0], [0, 0], [0, 0]],
                                      warp_bases=[[0, 0], [0, 0]], block_bases=[], shape=[4, 16])


@gluon.jit
def _store_p(p_s, p, sc):
    """P^T times the keys' scales (W holds the unscaled latent, V too) into `p_s` as the MMAs' `[K, N]`
    operand."""
    p_s.store(gl.permute((p * sc[:, None]).to(gl.bfloat16), (1, 0)))


@gluon.jit
def _span(schedule_ptr, w, batch):
    """(first, last) sequence of worker w's span."""
    first_seq = gl.load(schedule_ptr + (1 + w) * 4)
    last_seq = gl.minimum(gl.load(schedule_ptr + (1 + w) * 4 + 2), batch - 1)
    return first_seq, last_seq


@gluon.constexpr_function
def _entry_layout():
    """A vector of ENTRIES table entries over the loader warp: one per thread."""
    return gl.BlockedLayout([1], [32], [1], [0])


@gluon.jit
def _table_entries(lookup_row, k_lo, hi, page_size, first, n_blocks):
    """The table entries of blocks `[first, first + ENTRIES)` of the piece (blocks past `n_blocks`: 0, unused).
    A block's entry is its first key's (clamped to hi - 1, a used page: a guard only, since every block of the
    piece starts below hi)."""
    i = first + gl.arange(0, ENTRIES, _entry_layout())
    k0 = k_lo + i * BLOCK_N
    return gl.load(lookup_row + gl.minimum(k0, hi - 1) // page_size, mask=i < n_blocks, other=0)


@gluon.jit
def _loader(q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
            k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch, num_heads,
            mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b, stride_s_s, stride_lt_b,
            SLOTS: gl.constexpr, SPLIT_LATENT: gl.constexpr):
    """The copies: q's rows per piece; each block's two halves of 32 rows (their 512 latent and 128 rope bytes by
    TMA, their scales by `cp.async`), each into ring slot `(2c + h) % SLOTS` once its consumer released it.
    SPLIT_LATENT (`mla_decode_ws16_rs`): a half's latent in four boxes of 128 bytes a row, swizzled; slot st is
    half st % 2 of pair st // 2, whose latent chunk ch is `raw_s.index(4 * (st // 2) + ch)` `[64, 32]` and rope
    `rr_s.index(st // 2)`."""
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
            # q's rows viewed as [T * H, 576] from row_start * H on (rows past the sequence's tokens are
            # another's or zeros: they see no key and are not written)
            mbarrier.wait(q_empty, (pieces & 1) ^ 1)
            mbarrier.expect(q_ready, N_CHUNKS * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
            q_row = row_start * num_heads
            for ch in gl.static_range(N_CHUNKS):
                tma.async_copy_global_to_shared(q_desc, [q_row, CHUNK * ch], q_ready, q_s.index(ch))
            tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)
            pieces += 1
            # the table entries of the blocks, ENTRIES blocks per load, one load ahead: a load per block would put
            # its latency on every block's copies. (A group's entries live in the outer loop's body: reassigned
            # under an `if` in the block loop they were not carried across its iterations.)
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
                        # the scales first: their cp.async arrival holds the barrier's phase open until they
                        # land, and the expect below is the phase's one counted arrival
                        keys = kh + gl.arange(0, HALF, sc_layout)
                        slot = kh % page_size + gl.arange(0, HALF, sc_layout)
                        s_ptr = (scales_ptr + page.to(gl.int64) * stride_s_b + s_layer_off
                                 + slot.to(gl.int64) * stride_s_s)
                        async_copy.async_copy_global_to_shared(sc_s.index(st), s_ptr, mask=(keys >= lo) & (keys < hi))
                        async_copy.mbarrier_arrive(k_ready.index(st))
                        bar = k_ready.index(st)
                        row = page * page_rows + layer_row0 + kh % page_size
                        if SPLIT_LATENT:
                            mbarrier.expect(bar, N_CHUNKS * lat_desc.block_type.nbytes + rope_desc.block_type.nbytes)
                            for ch in gl.static_range(N_CHUNKS):
                                tma.async_copy_global_to_shared(lat_desc, [row, ch * CHUNK // 4], bar,
                                                                raw_s.index(4 * (st // 2) + ch).slice(h * HALF, HALF))
                            tma.async_copy_global_to_shared(rope_desc, [row, D_LAT // 4], bar,
                                                            rr_s.index(st // 2).slice(h * HALF, HALF))
                        else:
                            mbarrier.expect(bar, lat_desc.block_type.nbytes + rope_desc.block_type.nbytes)
                            # whole rows' bytes in two boxes (the rows as int32 values, copied as they are)
                            tma.async_copy_global_to_shared(lat_desc, [row, 0], bar, raw_s.index(st))
                            tma.async_copy_global_to_shared(rope_desc, [row, D_LAT // 4], bar, rr_s.index(st))
                    c += 1


@gluon.jit
def _latent_chunk(raw_s, st, ch: gl.constexpr, layout: gl.constexpr):
    """Latent columns [128 ch, 128 ch + 128) of ring slot st: 32 int32 values per row, four e4m3 values each."""
    return raw_s.index(st).slice(ch * CHUNK // 4, CHUNK // 4, dim=1).load(layout)


@gluon.jit
def _store_widened(wc_s, buf, h: gl.constexpr, x):
    """`x` (`_latent_chunk`) widened to bf16 (`pagedmla.kernels.fp8`'s exact conversion), 64 int32 pairs per row,
    into rows [32 h, 32 h + 32) of W buffer buf of a chunk (`wc_s`: the chunk's allocation)."""
    lo2, hi2 = gl.inline_asm_elementwise(E4M3X4_TO_BF16_ASM, "=r,=r,r", [x], dtype=(gl.int32, gl.int32),
                                         is_pure=True, pack=1)
    wc_s.index(buf).slice(h * HALF, HALF, dim=0).store(gl.join(lo2, hi2).reshape([HALF, CHUNK // 2]))


@gluon.jit
def _read_half(raw_s, rr_s, sc_s, k_ready, n, SLOTS: gl.constexpr, layout: gl.constexpr,
               sc_layout: gl.constexpr):
    """Ring slot n % SLOTS once its copies have landed: its latent (four int32 chunks), rope and scales."""
    st = n % SLOTS
    mbarrier.wait(k_ready.index(st), (n // SLOTS) & 1)
    return (_latent_chunk(raw_s, st, 0, layout), _latent_chunk(raw_s, st, 1, layout),
            _latent_chunk(raw_s, st, 2, layout), _latent_chunk(raw_s, st, 3, layout), rr_s.index(st).load(layout),
            sc_s.index(st).load(sc_layout))


@gluon.jit
def _release_slot(k_empty, n, SLOTS: gl.constexpr):
    """Ring slot n % SLOTS back to the loader, once every warp's reads of it are done: a proxy fence (the slot's
    next bytes come by TMA, the async proxy; without it the results came out wrong now and then), a barrier."""
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(k_empty.index(n % SLOTS))


@gluon.jit
def _write_half(w0_s, w1_s, w2_s, w3_s, wr_s, buf, h: gl.constexpr, x0, x1, x2, x3, rope):
    """A half read by `_read_half` into rows [32 h, 32 h + 32) of W buffer buf, widened, and its rope tile."""
    _store_widened(w0_s, buf, h, x0)
    _store_widened(w1_s, buf, h, x1)
    _store_widened(w2_s, buf, h, x2)
    _store_widened(w3_s, buf, h, x3)
    wr_s.index(buf).slice(h * HALF, HALF, dim=0).store(rope)


@gluon.jit
def _widener(raw_s, rr_s, sc_s, w0_s, w1_s, w2_s, w3_s, wr_s, scw_s, k_ready, k_empty, w_ready, w_free,
             schedule_ptr, offsets_ptr, cache_lengths_ptr, w, batch, num_heads, mask_code, window,
             SLOTS: gl.constexpr, WIDEN_WARPS: gl.constexpr):
    """Each block into W buffer c % 2 once the MMA warps are done with its previous block (`w_free`): the e4m3
    latent widened to bf16, the rope columns and the scales copied, half by half (32 rows, one ring slot each,
    released as soon as it is read), one signal per block (`w_ready`). Within a piece each half's slot is read
    one step ahead, so that its loads are in flight while the previous half is widened and stored (1.9% faster
    at B64 and B128 N4096, BENCHMARKS.md, twenty-first session; with 96 registers it spilled and was slower).
    Everything is moved as int32 values (four e4m3 or two bf16 values each): with the e4m3 values as bytes the
    compiler spent three byte permutes per four values repacking them for the conversion.

    Rows of keys outside the piece are widened like the others, unmasked: every e4m3 byte (NaN's too) widens to
    a finite value, and their P is 0 (their logits are masked, their scales copied as 0)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WIDEN_WARPS, 1], [1, 0])
    sc_layout: gl.constexpr = gl.BlockedLayout([1], [32], [WIDEN_WARPS], [0])
    wait_for_prior_grid(w)
    first_seq, last_seq = _span(schedule_ptr, w, batch)
    c = 0
    for b in range(first_seq, last_seq + 1):
        _active, _whole, _lo, _hi, _k_lo, n_blocks, _row_start, _num_q, _lo_r, _hi_r, _lo_max, _hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, 0, num_heads, mask_code, window,
            gl.SliceLayout(0, layout), ROWS)
        # never ahead into the next piece: its copies wait for the MMA warps to release q, which they do only
        # after this piece's last block, which waits for this partition (a read ahead across pieces hung)
        if n_blocks > 0:
            x0, x1, x2, x3, xr, xs = _read_half(raw_s, rr_s, sc_s, k_ready, 2 * c, SLOTS, layout, sc_layout)
            for i in range(n_blocks):
                buf = c % 2
                _release_slot(k_empty, 2 * c, SLOTS)
                y0, y1, y2, y3, yr, ys = _read_half(raw_s, rr_s, sc_s, k_ready, 2 * c + 1, SLOTS, layout,
                                                    sc_layout)
                mbarrier.wait(w_free.index(buf), ((c // 2) & 1) ^ 1)
                _write_half(w0_s, w1_s, w2_s, w3_s, wr_s, buf, 0, x0, x1, x2, x3, xr)
                scw_s.index(buf).slice(0, HALF).store(xs)
                _release_slot(k_empty, 2 * c + 1, SLOTS)
                if i + 1 < n_blocks:
                    x0, x1, x2, x3, xr, xs = _read_half(raw_s, rr_s, sc_s, k_ready, 2 * c + 2, SLOTS, layout,
                                                        sc_layout)
                _write_half(w0_s, w1_s, w2_s, w3_s, wr_s, buf, 1, y0, y1, y2, y3, yr)
                scw_s.index(buf).slice(HALF, HALF).store(ys)
                fence_async_shared()  # the MMAs read W through the async proxy
                gl.thread_barrier()  # every thread's part of the block is written
                mbarrier.arrive(w_ready.index(buf))
                c += 1


@gluon.jit
def _mma_warps(q_s, qr_s, w0_s, w1_s, w2_s, w3_s, wr_s, scw_s, p_s, red_s, q_ready, q_empty, w_ready, w_free,
               schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr,
               w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h,
               stride_po_s, stride_po_r, stride_pl_s, HAS_SINK: gl.constexpr):
    """Logits, softmax and P @ V of each block (W buffer c % 2), then the piece's rows to `out` / `lse` or to its
    partial slot."""
    layout: gl.constexpr = _acc_layout()
    col_l: gl.constexpr = gl.SliceLayout(0, layout)  # one value per query row (a column of S^T)
    key_l: gl.constexpr = gl.SliceLayout(1, layout)  # one value per key (a row of S^T)
    wait_for_prior_grid(w)
    first_seq, last_seq = _span(schedule_ptr, w, batch)
    c = 0
    pieces = 0
    for b in range(first_seq, last_seq + 1):
        active, whole, _lo, _hi, k_lo, n_blocks, row_start, num_q, lo_r, hi_r, lo_max, hi_min = _piece(
            schedule_ptr, offsets_ptr, cache_lengths_ptr, b, w, 0, num_heads, mask_code, window, col_l, ROWS)
        if active:
            m_i = gl.full([ROWS], float("-inf"), gl.float32, col_l)
            l_cols = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
            o0 = gl.zeros([CHUNK, ROWS], gl.float32, layout)
            o1 = gl.zeros([CHUNK, ROWS], gl.float32, layout)
            o2 = gl.zeros([CHUNK, ROWS], gl.float32, layout)
            o3 = gl.zeros([CHUNK, ROWS], gl.float32, layout)
            if n_blocks > 0:
                mbarrier.wait(q_ready, pieces & 1)
                for i in range(n_blocks):
                    buf = c % 2
                    k0 = k_lo + i * BLOCK_N
                    # q's chunks through an opaque 0 (see `gluon_common.opaque_zero`)
                    dyn = opaque_zero(c)
                    mbarrier.wait(w_ready.index(buf), (c // 2) & 1)
                    s_rope = warpgroup_mma(_bf16(wr_s.index(buf), D_ROPE), qr_s.permute((1, 0)),
                                           gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False,
                                           is_async=True)
                    s_lat = warpgroup_mma(_bf16(w0_s.index(buf), CHUNK), q_s.index(dyn).permute((1, 0)),
                                          gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False,
                                          is_async=True)
                    s_lat = warpgroup_mma(_bf16(w1_s.index(buf), CHUNK), q_s.index(1 + dyn).permute((1, 0)), s_lat,
                                          is_async=True)
                    s_lat = warpgroup_mma(_bf16(w2_s.index(buf), CHUNK), q_s.index(2 + dyn).permute((1, 0)), s_lat,
                                          is_async=True)
                    s_lat = warpgroup_mma(_bf16(w3_s.index(buf), CHUNK), q_s.index(3 + dyn).permute((1, 0)), s_lat,
                                          is_async=True)
                    sc = scw_s.index(buf).load(key_l)
                    s_rope, s_lat = warpgroup_mma_wait(num_outstanding=0, deps=(s_rope, s_lat))
                    # W holds the unscaled latent: the key's scale multiplies its latent logits
                    s = (s_lat * sc[:, None] + s_rope) * qk_scale
                    if (k0 < lo_max) | (k0 + BLOCK_N > hi_min):
                        j = k0 + gl.arange(0, BLOCK_N, key_l)
                        s = gl.where((j[:, None] >= lo_r[None, :]) & (j[:, None] < hi_r[None, :]), s, float("-inf"))
                    # the rows' maxima over each warp's 16 keys, exchanged through shared memory at the barrier
                    # that publishes P (see RESCALE_LOG2)
                    red_s.index(c % 2).store(gl.max(gl.reshape(s, [4, 16, ROWS]), axis=1))
                    # P against the running maximum as it stands: any increase is folded in only once it passes
                    # RESCALE_LOG2 (then, or when a row had none, the block is done again below)
                    p = gl.exp2(s - _no_inf(m_i)[None, :])
                    # P^T, with the keys' scales (V is the unscaled latent too), as the MMAs' [K, N] operand
                    _store_p(p_s, p, sc)
                    fence_async_shared()
                    gl.thread_barrier()
                    blk_max = gl.convert_layout(gl.max(red_s.index(c % 2).load(_red_layout()), axis=0), col_l)
                    # every warp takes this branch the same way (the same maxima from shared memory, the same
                    # m_i), so the barrier inside it is safe; rows past the sequence's (padding rows of a tile
                    # whose H does not divide 16) can take it needlessly in interior blocks: speed only
                    if gl.max((blk_max > m_i + RESCALE_LOG2).to(gl.int32), axis=0) > 0:
                        m_new = gl.maximum(m_i, blk_max)
                        m_safe = _no_inf(m_new)
                        alpha = gl.exp2(m_i - m_safe)
                        p = gl.exp2(s - m_safe[None, :])
                        l_cols = l_cols * alpha[None, :]
                        o0 = o0 * alpha[None, :]
                        o1 = o1 * alpha[None, :]
                        o2 = o2 * alpha[None, :]
                        o3 = o3 * alpha[None, :]
                        m_i = m_new
                        _store_p(p_s, p, sc)
                        fence_async_shared()
                        gl.thread_barrier()
                    l_cols = l_cols + p
                    pt = p_s.permute((1, 0))
                    o0 = warpgroup_mma(_bf16(w0_s.index(buf), CHUNK).permute((1, 0)), pt, o0, is_async=True)
                    o1 = warpgroup_mma(_bf16(w1_s.index(buf), CHUNK).permute((1, 0)), pt, o1, is_async=True)
                    o2 = warpgroup_mma(_bf16(w2_s.index(buf), CHUNK).permute((1, 0)), pt, o2, is_async=True)
                    o3 = warpgroup_mma(_bf16(w3_s.index(buf), CHUNK).permute((1, 0)), pt, o3,
                                       is_async=True)
                    o0, o1, o2, o3 = warpgroup_mma_wait(num_outstanding=0, deps=(o0, o1, o2, o3))
                    mbarrier.arrive(w_free.index(buf))
                    c += 1
                # every warp is past its last MMA on q before the loader overwrites it (the compiler puts this
                # barrier before the single-thread arrive anyway, as before w_free's; written out for the reader)
                gl.thread_barrier()
                mbarrier.arrive(q_empty)
                pieces += 1

            _finish_piece(o0, o1, o2, o3, m_i, gl.sum(l_cols, axis=0), whole, b, first_seq, w, row_start, num_q,
                          num_heads, sink_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, stride_o_t, stride_o_h,
                          stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, col_l, HAS_SINK, False)


@gluon.jit
def _finish_piece(o0, o1, o2, o3, m_i, l_i, whole, b, first_seq, w, row_start, num_q, num_heads, sink_ptr, out_ptr,
                  lse_ptr, part_out_ptr, part_lse_ptr, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h,
                  stride_po_s, stride_po_r, stride_pl_s, col_l: gl.constexpr, HAS_SINK: gl.constexpr,
                  RELABELED: gl.constexpr):
    """A piece's rows (O^T chunks o0..o3 over the sums l_i, running maxima m_i in `col_l`) to `out` / `lse` for a
    whole sequence, else to the piece's partial slot `2w` or `2w + 1` with its LSE. RELABELED: the chunks' rows
    are `mla_decode_ws16_rs`'s relabeled dims (`_store_chunk`)."""
    has = l_i > 0.0
    m_use = _no_inf(m_i)
    l_safe = gl.where(has, l_i, 1.0)
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
    rows = gl.arange(0, ROWS, col_l)
    rows_ok = rows < num_q * num_heads
    heads = rows % num_heads
    # the sink joins the denominator of whole sequences (sink_ptr is any float32 buffer of H values
    # without one, loaded and dropped, as in `mla_decode_ws`)
    sink = gl.where(whole & HAS_SINK, gl.load(sink_ptr + heads, mask=rows_ok, other=0.0) * LOG2E,
                    float("-inf"))
    if whole:
        inv = gl.where(has, 1.0 / (l_safe + gl.exp2(sink - m_use)), 0.0)
        o_row = (row_start + rows // num_heads).to(gl.int64) * stride_o_t + heads.to(gl.int64) * stride_o_h
        _store_chunks(out_ptr, o_row, o0, o1, o2, o3, inv, rows_ok, False, RELABELED)
        gl.store(lse_ptr + (row_start + rows // num_heads).to(gl.int64) * stride_lse_t
                 + heads.to(gl.int64) * stride_lse_h, lse, mask=rows_ok)
    else:
        slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
        inv = gl.where(has, 1.0 / l_safe, 0.0)
        _store_chunks(part_out_ptr, slot * stride_po_s + rows.to(gl.int64) * stride_po_r, o0, o1, o2, o3, inv,
                      rows_ok, True, RELABELED)
        gl.store(part_lse_ptr + slot * stride_pl_s + rows, lse, mask=rows_ok, eviction_policy="evict_last")


@gluon.jit
def _store_chunk(ptr, row_off, ch: gl.constexpr, acc, inv, rows_ok, KEEP: gl.constexpr, RELABELED: gl.constexpr):
    """Output chunk ch (O^T `[128, 16]`: column ch * 128 + m of row n) times the rows' `inv` to
    `ptr + row_off[n] + column`, in the pointer's dtype. KEEP: partial results, stored with L2 policy evict_last
    (see `mla_sparse_decode_ring._store_rows`). RELABELED (`mla_decode_ws16_rs._v_operand`): chunk row
    m = 64 a + 16 w + 8 h + r holds column 32 w + 4 r + 2 a + h."""
    if RELABELED:
        # the register tensor put in column order ((a, w, h, r) -> (w, r, a, h): no data moves), then through
        # shared memory into four columns of four rows a thread, so that the stores are vectors along the row:
        # 16 bytes of float32 partials, 8 of bf16 rows (in the accumulator's relabeled layout they were 4-byte
        # stores 16 bytes apart: 3.6 us for a piece's partial at B64 N4096, BENCHMARKS.md, twenty-third session)
        layout: gl.constexpr = gl.BlockedLayout([4, 1], [32, 1], [1, 4], [0, 1])
        val = gl.reshape(acc * inv[None, :], [2, 4, 2, 8, ROWS])
        val = gl.permute(val, (1, 3, 0, 2, 4)).reshape([CHUNK, ROWS])
        val = gl.convert_layout(val.to(ptr.dtype.element_ty), layout)
        cols = ch * CHUNK + gl.arange(0, CHUNK, gl.SliceLayout(1, layout))
        row_off = gl.convert_layout(row_off, gl.SliceLayout(0, layout))
        rows_ok = gl.convert_layout(rows_ok, gl.SliceLayout(0, layout))
    else:
        layout: gl.constexpr = _acc_layout()
        cols = ch * CHUNK + gl.arange(0, CHUNK, gl.SliceLayout(1, layout))
        val = (acc * inv[None, :]).to(ptr.dtype.element_ty)
    ptrs = ptr + row_off[None, :] + cols[:, None]
    if KEEP:
        gl.store(ptrs, val, mask=rows_ok[None, :], eviction_policy="evict_last")
    else:
        gl.store(ptrs, val, mask=rows_ok[None, :])


@gluon.jit
def _store_chunks(ptr, row_off, o0, o1, o2, o3, inv, rows_ok, KEEP: gl.constexpr, RELABELED: gl.constexpr):
    _store_chunk(ptr, row_off, 0, o0, inv, rows_ok, KEEP, RELABELED)
    _store_chunk(ptr, row_off, 1, o1, inv, rows_ok, KEEP, RELABELED)
    _store_chunk(ptr, row_off, 2, o2, inv, rows_ok, KEEP, RELABELED)
    _store_chunk(ptr, row_off, 3, o3, inv, rows_ok, KEEP, RELABELED)


# as `_mla_decode_ws_kernel`: no recompile when a size becomes 1 or changes its divisibility by 16
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
    """Program w: worker w's span of the schedule. The cache is read through `lat_desc` and `rope_desc`, its
    640-byte rows as a 2-D float32 view `[rows, 160]` (bits copied as they are: columns 0-127 the e4m3 latent,
    128-159 the bf16 rope), in which page p's slot s of this layer is row `p * page_rows + layer_row0 + s`; the
    row's scale is at `scales_ptr + page * stride_s_b +
    s_layer_off + slot * stride_s_s`. q is read through `q_desc` / `qr_desc` (`[T * H, 576]`)."""
    w = gl.program_id(0)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [N_CHUNKS, ROWS, CHUNK], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)
    # the ring: SLOTS slots of 32 rows (latent bytes, rope bytes, scales)
    raw_s = gl.allocate_shared_memory(gl.int32, [SLOTS, HALF, D_LAT // 4], lat_desc.layout)
    rr_s = gl.allocate_shared_memory(gl.int32, [SLOTS, HALF, D_ROPE // 2], rope_desc.layout)
    sc_s = gl.allocate_shared_memory(gl.float32, [SLOTS, HALF], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    # two widened blocks: latent W (4 chunks each), rope and scales
    # (an allocation per chunk: with the four in one, indexed at run time, the compiler could not tell the widen
    # warps' stores to different chunks apart and put a barrier before each chunk's)
    w0_s = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, CHUNK // 2], _i32_tile())
    w1_s = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, CHUNK // 2], _i32_tile())
    w2_s = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, CHUNK // 2], _i32_tile())
    w3_s = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, CHUNK // 2], _i32_tile())
    wr_s = gl.allocate_shared_memory(gl.int32, [2, BLOCK_N, D_ROPE // 2], _i32_tile())
    scw_s = gl.allocate_shared_memory(gl.float32, [2, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    p_s = gl.allocate_shared_memory(gl.bfloat16, [ROWS, BLOCK_N], _bf16_tile())
    # the MMA warps' per-warp row maxima, two blocks' worth (a block's are read after the barrier that publishes
    # its P and written again two blocks later, past the next block's barrier)
    red_s = gl.allocate_shared_memory(gl.float32, [2, 4, ROWS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    k_ready = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    w_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    w_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    qb = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = qb.index(0)
    q_empty = qb.index(1)
    for i in gl.static_range(SLOTS):
        mbarrier.init(k_ready.index(i), count=1)  # the loader's expect (and its scale copies, see `_loader`)
        mbarrier.init(k_empty.index(i), count=1)  # the widen warps
    for i in gl.static_range(2):
        mbarrier.init(w_ready.index(i), count=1)
        mbarrier.init(w_free.index(i), count=1)
    mbarrier.init(q_ready, count=1)
    mbarrier.init(q_empty, count=1)
    fence_async_shared()

    gl.warp_specialize([
        (_mma_warps, (q_s, qr_s, w0_s, w1_s, w2_s, w3_s, wr_s, scw_s, p_s, red_s, q_ready, q_empty, w_ready, w_free,
                      schedule_ptr, offsets_ptr, cache_lengths_ptr, sink_ptr, out_ptr, lse_ptr, part_out_ptr,
                      part_lse_ptr, w, batch, num_heads, mask_code, window, qk_scale, stride_o_t, stride_o_h,
                      stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, HAS_SINK)),
        (_widener, (raw_s, rr_s, sc_s, w0_s, w1_s, w2_s, w3_s, wr_s, scw_s, k_ready, k_empty, w_ready, w_free,
                    schedule_ptr, offsets_ptr, cache_lengths_ptr, w, batch, num_heads, mask_code, window, SLOTS,
                    WIDEN_WARPS)),
        (_loader, (q_desc, qr_desc, lat_desc, rope_desc, q_s, qr_s, raw_s, rr_s, sc_s, q_ready, q_empty, k_ready,
                   k_empty, schedule_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, scales_ptr, w, batch,
                   num_heads, mask_code, window, page_size, page_rows, layer_row0, s_layer_off, stride_s_b,
                   stride_s_s, stride_lt_b, SLOTS, False)),
    ], [WIDEN_WARPS, 1], [WIDEN_REGS, LOADER_REGS])
