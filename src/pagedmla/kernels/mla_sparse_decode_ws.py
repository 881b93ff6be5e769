"""Warp-specialized sparse (top-k) MLA decode for Hopper, in Gluon: 64-row tiles (64 heads of one query token) over
the rope-aware FP8 cache (512 e4m3 latent bytes with one float32 scale per row, then 64 bf16 rope columns) with
a bf16 q. DeepSeek-V3.2's attention at 64 and 128 heads.

Why. The Triton sparse kernel (`pagedmla.kernels.mla_sparse_decode`) runs 64-row tiles on two warpgroups that
both compute the whole logits tile (each needs all of P for its half of P @ V), and widens every gathered e4m3
tile on the critical path between its loads and its MMAs: 192.5 TFLOP/s at the V3.2 shape (H200). Here each 32-key
block's logits are computed once, by one warpgroup, as in `pagedmla.kernels.mla_decode_ws`, whose "seesaw" this
kernel keeps: blocks go in pairs (a, b), consumer 0 computes block a's logits and softmax while consumer 1
computes block b's, and each consumer owns 256 of the 512 output columns, so both do P_a @ V_a and P_b @ V_b
on their columns (P of the other's block through shared memory, the running max and row sums through
mbarriers).

Gathers. Consumer c gathers its own blocks (a for 0, b for 1) with `cp.async` (no registers held): the e4m3
latent into a staging slot, the rope columns straight into one of the consumer's two rope slots, the rows'
scales beside them, and the index entries of its block after next into a small index ring, so no global load
sits on the critical path. At the top of a pair the consumer waits for its block, issues the rope columns'
MMA, widens the staged latent to bf16 (exactly: `pagedmla.kernels.fp8`'s conversion) into its key slot, which
the other consumer's P @ V reads, one 256-column half at a time (the first half's MMA runs while the second is
widened: 282.0 -> 260.9 us at the V3.2 shape; 128-column parts, with twice the barriers, took 286.3), and
issues its next block's copies into the freed staging slot. Entries that are -1, outside the pool or past
`topk_lengths[b]` copy as zero rows and are masked in S. The row's scale multiplies the latent logits and P's
column (V is the raw latent). Shared memory: q 72 KB, two bf16 key slots 64 KB, four rope slots 16 KB, two P
tiles 8 KB, two staging slots 32 KB: one program per SM.

Work decomposition (as the Triton kernel's, without the extra stream): program (token x head tile, split) owns
64 heads of one token and the split's share of the token's 32-key index blocks (with `FOLD`, the index row of
its sequence's first token). With one split the program finishes its rows (sink, normalization) and writes
`out` and `lse`; with several it writes a normalized partial and its LSE, merged by
`mla_sparse_decode._mla_sparse_decode_combine_kernel`. Compiled only for sm_90 (warpgroup MMAs); the CPU
interpreter cannot run Gluon, so this path is tested in the gpu tier against the reference.
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
from .gluon_common import BLOCK_M, COLS, D_LAT, D_ROPE, LN2, LOG2E, mma_layout, opaque_zero, wait_for_prior_grid
from .mla_sparse_decode_ring import _idx_copy, _rope_copy, _row_offset, _sequence_of, _smem8

BLOCK_N = gl.constexpr(32)


@gluon.constexpr_function
def _half_copy():
    """Copies of half a block's e4m3 latent `[32, 256]` (and its widening, 16 rows at a time): 16 bytes per
    thread, 16 threads a row."""
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _block_rows(idx_s, slot, block, count, pool_rows, layout: gl.constexpr):
    """(cache row, is a key) of index block `block`'s 32 keys, from index-ring slot `slot`, in `layout` (1-D):
    -1, out-of-pool entries and keys at or past `count` are no key (row 0, never read)."""
    keys = block * BLOCK_N + gl.arange(0, BLOCK_N, layout)
    idx = idx_s.index(slot).load(layout)
    ok = (keys < count) & (idx >= 0) & (idx < pool_rows)
    return gl.where(ok, idx, 0), ok


@gluon.jit
def _copy_entries(idx_s, slot, idx_row, stride_idx_k, block, count):
    """Asynchronous copy of index block `block`'s entries into index-ring slot `slot` (entries at or past
    `count` are not read)."""
    keys = block * BLOCK_N + gl.arange(0, BLOCK_N, _idx_copy())
    async_copy.async_copy_global_to_shared(idx_s.index(slot), idx_row + keys.to(gl.int64) * stride_idx_k,
                                           mask=keys < count)


@gluon.jit
def _copy_block(C: gl.constexpr, stage_s, kr_s, sc_s, idx_s, islot, rslot, block, count, pool_rows, lat_ptr,
                rope_ptr, sc_ptr, stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s,
                PAGE_SIZE: gl.constexpr):
    """Asynchronous copies of block `block` (its entries in index-ring slot `islot`) for consumer C: the e4m3
    latent halves into C's staging slot, the rope columns into rope slot `rslot`, the scales into C's scale
    slot; zero rows for entries that are no key. The pointers are the layer's (and the rope columns')."""
    h_layout: gl.constexpr = _half_copy()
    rows, ok = _block_rows(idx_s, islot, block, count, pool_rows, gl.SliceLayout(1, h_layout))
    off = _row_offset(rows, 0, stride_b_b, stride_b_s, PAGE_SIZE)
    for h in gl.static_range(2):
        cols = h * COLS + gl.arange(0, COLS, gl.SliceLayout(0, h_layout))
        async_copy.async_copy_global_to_shared(stage_s.index(2 * C + h), lat_ptr + off[:, None] + cols[None, :],
                                               mask=ok[:, None])
    r_layout: gl.constexpr = _rope_copy()
    rows_r, ok_r = _block_rows(idx_s, islot, block, count, pool_rows, gl.SliceLayout(1, r_layout))
    off_r = _row_offset(rows_r, 0, stride_r_b, stride_r_s, PAGE_SIZE)
    cols_r = gl.arange(0, D_ROPE, gl.SliceLayout(0, r_layout))
    async_copy.async_copy_global_to_shared(kr_s.index(rslot), rope_ptr + off_r[:, None] + cols_r[None, :],
                                           mask=ok_r[:, None])
    rows_s, ok_s = _block_rows(idx_s, islot, block, count, pool_rows, _idx_copy())
    async_copy.async_copy_global_to_shared(
        sc_s.index(C), sc_ptr + _row_offset(rows_s, 0, stride_s_b, stride_s_s, PAGE_SIZE), mask=ok_s)


@gluon.jit
def _widen_half(stage_s, k_s, h: gl.constexpr):
    """Latent half h (staging and key tiles 2 C and 2 C + 1 are consumer C's), as bf16, exactly; 16 rows at a
    time (fewer registers held)."""
    for r in gl.static_range(BLOCK_N // 16):
        x = stage_s.index(h).slice(16 * r, 16, dim=0).load(_half_copy())
        k_s.index(h).slice(16 * r, 16, dim=0).store(gl.inline_asm_elementwise(
            E4M3X4_TO_BF16_ASM, "=r,=r,r", [x.to(gl.uint8, bitcast=True)], dtype=gl.bfloat16, is_pure=True, pack=4))


@gluon.jit
def _take_block(C: gl.constexpr, i, q_s, qr_s, k_s, kr_s, stage_s, sc_s, idx_s, k_free, block, nxt, ahead, count,
                count_nxt, count_ahead, pool_rows, idx_row, stride_idx_k, lat_ptr, rope_ptr, sc_ptr, stride_b_b,
                stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, qk_scale, PAGE_SIZE: gl.constexpr):
    """Consumer C's i-th own block `block`: wait for its copies and for its key slot (the other consumer's last
    P @ V on it), widen it, issue the copies of its next own block `nxt` and the entries of `ahead` (the one
    after; `count_nxt` / `count_ahead`: 0 for blocks past the split's range, which copy nothing), and return
    (the scaled, masked logits `[64, 32]`, the keys' scales)."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    async_copy.wait_group(0)
    gl.thread_barrier()  # every thread's copies have landed
    fence_async_shared()  # the MMAs read the copied rope columns and the widened keys through the async proxy
    # the rope columns were copied straight into their slot: their MMA runs while the latent is widened, and the
    # first latent half's MMA while the second half is. Slot indices through a runtime 0 made opaque just before
    # each MMA: with compile-time ones (or a value known earlier) the compiler computes the MMA descriptors of
    # q's and the key slot's tiles ahead and spills them
    s_rope = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s_rope = warpgroup_mma(qr_s, kr_s.index(2 * C + i % 2 + opaque_zero(i)).permute((1, 0)), s_rope, use_acc=False,
                           is_async=True)
    mbarrier.wait(k_free, (i & 1) ^ 1)
    _widen_half(stage_s, k_s, 2 * C)
    fence_async_shared()
    gl.thread_barrier()
    dyn = opaque_zero(i)
    s_lat = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s_lat = warpgroup_mma(q_s.index(dyn), k_s.index(2 * C + dyn).permute((1, 0)), s_lat, use_acc=False,
                          is_async=True)
    _widen_half(stage_s, k_s, 2 * C + 1)
    _, ok = _block_rows(idx_s, 2 * C + i % 2, block, count, pool_rows, col_layout)
    sc = sc_s.index(C).load(col_layout)
    fence_async_shared()
    gl.thread_barrier()  # the staging, scale and entry slots are read: the next copies may overwrite them
    dyn = opaque_zero(i)
    s_lat = warpgroup_mma(q_s.index(1 + dyn), k_s.index(2 * C + 1 + dyn).permute((1, 0)), s_lat, is_async=True)
    _copy_block(C, stage_s, kr_s, sc_s, idx_s, 2 * C + (i + 1) % 2, 2 * C + (i + 1) % 2, nxt, count_nxt, pool_rows,
                lat_ptr, rope_ptr, sc_ptr, stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s,
                PAGE_SIZE)
    _copy_entries(idx_s, 2 * C + i % 2, idx_row, stride_idx_k, ahead, count_ahead)
    async_copy.commit_group()
    s_lat, s_rope = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, s_rope))
    s = (s_lat * sc[None, :] + s_rope) * qk_scale
    return gl.where(ok[None, :], s, float("-inf")), sc


@gluon.jit
def _no_inf(x):
    """x with -inf replaced by 0: rows that have seen no visible key shift by 0, so exp2 gives 0, not NaN."""
    return gl.where(x == float("-inf"), 0.0, x)


@gluon.jit
def _consumer(C: gl.constexpr, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, p_s, stage_s, sc_s, idx_s, stats, q_ready,
              free0, free1, got_a, got_b, got_pa, stats_free, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr,
              blocks_ptr, rope_ptr, scales_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, batch, num_heads,
              num_tiles, num_splits, layer_idx, qk_scale, pool_rows, topk, stride_o_t, stride_o_h, stride_lse_t,
              stride_lse_h, stride_po_s, stride_po_t, stride_po_h, stride_pl_s, stride_pl_t, stride_idx_t,
              stride_idx_k, stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s, stride_s_b,
              stride_s_l, stride_s_s, PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, FOLD: gl.constexpr,
              HAS_SINK: gl.constexpr, SPLIT: gl.constexpr):
    """Consumer C: its blocks' gathers and logits, its role in each pair (see `mla_decode_ws`), output columns
    [256 C, 256 C + 256). `stats` rows: 0 m_a, 1 rowsum(P_a), 2 m_b, 3 rowsum(P_b)."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(COLS)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    pid = gl.program_id(0)
    split = gl.program_id(1)
    # launched as a programmatic dependent on Hopper (see `mla_decode_ws`): each partition waits for the previous
    # kernel before reading or writing memory
    wait_for_prior_grid(pid)
    tok = pid // num_tiles
    head0 = pid % num_tiles * BLOCK_M
    b = _sequence_of(offsets_ptr, tok, batch)
    idx_tok = tok
    if FOLD:
        idx_tok = gl.load(offsets_ptr + b)
    idx_row = idx_ptr + idx_tok.to(gl.int64) * stride_idx_t
    count = gl.minimum(gl.load(topk_len_ptr + b), topk)
    num_blocks = gl.cdiv(count, BLOCK_N)
    lo = split * num_blocks // num_splits
    hi = (split + 1) * num_blocks // num_splits
    n_blocks = hi - lo
    layer = layer_idx.to(gl.int64)
    lat_ptr = blocks_ptr + layer * stride_b_l
    rope_ptr = rope_ptr + layer * stride_r_l + ROPE_OFF
    sc_ptr = scales_ptr + layer * stride_s_l
    if C == 0:
        mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
        q_row = tok * num_heads + head0
        for ch in gl.static_range(2):
            tma.async_copy_global_to_shared(q_desc, [q_row, COLS * ch], q_ready, q_s.index(ch))
        tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)
    # the prologue: this consumer's first block (its entries loaded now), and the entries of its second
    first = lo + C
    keys = first * BLOCK_N + gl.arange(0, BLOCK_N, _idx_copy())
    first_n = gl.where(first < hi, count, 0)
    idx_s.index(2 * C).store(gl.load(idx_row + keys.to(gl.int64) * stride_idx_k, mask=keys < first_n, other=-1))
    gl.thread_barrier()
    _copy_block(C, stage_s, kr_s, sc_s, idx_s, 2 * C, 2 * C, first, first_n, pool_rows, lat_ptr, rope_ptr, sc_ptr,
                stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE)
    second = first + 2
    _copy_entries(idx_s, 2 * C + 1, idx_row, stride_idx_k, second, gl.where(second < hi, count, 0))
    async_copy.commit_group()
    mbarrier.wait(q_ready, 0)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    acc = gl.zeros([BLOCK_M, COLS], gl.float32, o_layout)
    for j in range(gl.cdiv(n_blocks, 2)):
        ka = lo + 2 * j
        has_b = 2 * j + 1 < n_blocks
        ph = j & 1
        dyn = j >> 30  # a runtime 0 in the slot indices (see _take_block)
        # this consumer's own block of the pair, the next one it copies and the one whose entries it copies
        own = ka + C
        nxt = own + 2
        ahead = own + 4
        count_nxt = gl.where(nxt < hi, count, 0)
        count_ahead = gl.where(ahead < hi, count, 0)
        if C == 0:
            s, sc = _take_block(0, j, q_s, qr_s, k_s, kr_s, stage_s, sc_s, idx_s, free0, own, nxt, ahead, count,
                                count_nxt, count_ahead, pool_rows, idx_row, stride_idx_k, lat_ptr, rope_ptr, sc_ptr,
                                stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, qk_scale,
                                PAGE_SIZE)
            m_a = gl.maximum(m_i, gl.max(s, axis=1))
            p = gl.exp2(s - _no_inf(m_a)[:, None])
            rs_a = gl.sum(p, axis=1)
            mbarrier.wait(stats_free, ph ^ 1)
            stats.index(0).store(m_a)
            stats.index(1).store(rs_a)
            mbarrier.arrive(got_a)
            scale_a = gl.exp2(m_i - _no_inf(m_a))
            acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
            pv = warpgroup_mma(gl.convert_layout((p * sc[None, :]).to(gl.bfloat16), p_op_layout), k_s.index(dyn), acc,
                               is_async=True)
            if has_b:
                mbarrier.wait(got_b, ph)
                m_b = stats.index(2).load(row_layout)
                rs_b = stats.index(3).load(row_layout)
                # 0 while the row has seen no key (m_a = -inf): exp2(0 - m_b) would overflow for m_b < -128
                # and turn 0 * inf into NaN
                scale_b = gl.exp2(m_a - _no_inf(m_b))
                # P_a against the pair's max, for consumer 1
                p_s.index(0).store((p * scale_b[:, None] * sc[None, :]).to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                acc = acc * gl.convert_layout(scale_b, o_rows)[:, None]
                pv = warpgroup_mma(p_s.index(1 + dyn), k_s.index(2 + dyn), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
            else:
                p_s.index(0).store((p * sc[None, :]).to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                l_i = l_i * scale_a + rs_a
                m_i = m_a
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            # consumer 1 may widen its next block into key slot 1 and write P_b again
            mbarrier.arrive(free1)
        else:
            s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
            sc = gl.zeros([BLOCK_N], gl.float32, gl.SliceLayout(0, s_layout))
            if has_b:
                # block b's logits run while consumer 0 works on block a
                s, sc = _take_block(1, j, q_s, qr_s, k_s, kr_s, stage_s, sc_s, idx_s, free1, own, nxt, ahead,
                                    count, count_nxt, count_ahead, pool_rows, idx_row, stride_idx_k, lat_ptr,
                                    rope_ptr, sc_ptr, stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b,
                                    stride_s_s, qk_scale, PAGE_SIZE)
            mbarrier.wait(got_a, ph)
            m_a = stats.index(0).load(row_layout)
            rs_a = stats.index(1).load(row_layout)
            mbarrier.arrive(stats_free)
            scale_a = gl.exp2(m_i - _no_inf(m_a))
            if has_b:
                m_b = gl.maximum(m_a, gl.max(s, axis=1))
                p = gl.exp2(s - _no_inf(m_b)[:, None])
                rs_b = gl.sum(p, axis=1)
                p_b = (p * sc[None, :]).to(gl.bfloat16)
                p_s.index(1).store(p_b)
                stats.index(2).store(m_b)
                stats.index(3).store(rs_b)
                fence_async_shared()
                mbarrier.arrive(got_b)
                scale_b = gl.exp2(m_a - _no_inf(m_b))
                acc = acc * gl.convert_layout(scale_a * scale_b, o_rows)[:, None]
                pv = warpgroup_mma(gl.convert_layout(p_b, p_op_layout), k_s.index(3 + dyn), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(p_s.index(dyn), k_s.index(1 + dyn), pv, is_async=True)
            else:
                acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
                l_i = l_i * scale_a + rs_a
                m_i = m_a
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(p_s.index(dyn), k_s.index(1 + dyn), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            # consumer 0 may widen its next block into key slot 0 and write P_a again
            mbarrier.arrive(free0)
    async_copy.wait_group(0)

    has = l_i > 0.0
    l_safe = gl.where(has, l_i, 1.0)
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
    rows = gl.arange(0, BLOCK_M, row_layout)
    r = gl.arange(0, BLOCK_M, o_rows)
    d = COLS * C + gl.arange(0, COLS, gl.SliceLayout(0, o_layout))
    if SPLIT:
        inv = gl.where(has, 1.0 / l_safe, 0.0)
        out = acc * gl.convert_layout(inv, o_rows)[:, None]
        row_off = split.to(gl.int64) * stride_po_s + tok.to(gl.int64) * stride_po_t + (head0 + r).to(gl.int64) * stride_po_h
        gl.store(part_out_ptr + row_off[:, None] + d[None, :], out)
        if C == 0:
            gl.store(part_lse_ptr + split.to(gl.int64) * stride_pl_s + tok.to(gl.int64) * stride_pl_t + head0 + rows,
                     lse)
    else:
        denom = l_safe
        if HAS_SINK:
            # the sink joins the denominator only; a +inf sink gives 0
            sink = gl.load(sink_ptr + head0 + rows) * LOG2E
            denom += gl.exp2(sink - _no_inf(m_i))
        inv = gl.where(has, 1.0 / denom, 0.0)
        out = acc * gl.convert_layout(inv, o_rows)[:, None]
        row_off = tok.to(gl.int64) * stride_o_t + (head0 + r).to(gl.int64) * stride_o_h
        gl.store(out_ptr + row_off[:, None] + d[None, :], out.to(out_ptr.dtype.element_ty))
        if C == 0:
            gl.store(lse_ptr + tok.to(gl.int64) * stride_lse_t + (head0 + rows).to(gl.int64) * stride_lse_h, lse)


# no recompile when a size becomes 1 or changes its divisibility by 16 (a multi-second compile in the middle of
# serving, or inside a CUDA-graph capture); the cache's strides stay specialized (the 16-byte copies need their
# divisibility) and the page size is a compile-time constant (a row id splits into page and slot with shifts)
@gluon.jit(do_not_specialize=["batch", "num_heads", "num_tiles", "num_splits", "layer_idx", "pool_rows", "topk",
                              "stride_pl_s"])
def _mla_sparse_decode_ws_kernel(
    q_desc, qr_desc, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr,
    blocks_ptr, rope_ptr, scales_ptr,
    batch, num_heads, num_tiles, num_splits, layer_idx, qk_scale, pool_rows, topk,
    stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_t, stride_po_h, stride_pl_s,
    stride_pl_t, stride_idx_t, stride_idx_k, stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s,
    stride_s_b, stride_s_l, stride_s_s,
    PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, FOLD: gl.constexpr, HAS_SINK: gl.constexpr,
    SPLIT: gl.constexpr, CONSUMER_REGS: gl.constexpr,
):
    """Program (token x head tile, split). q is read through `q_desc` / `qr_desc` (TMA, `[T * H, 576]` rows);
    the cache is `blocks_ptr` (FP8 rows), its bf16 view `rope_ptr` (rope columns at ROPE_OFF) and the rows'
    scales `scales_ptr` (column 0)."""
    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_M, COLS], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_ROPE], qr_desc.layout)
    k_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, COLS], gl.bfloat16)
    kr_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, D_ROPE], gl.bfloat16)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.bfloat16)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_N, COLS], k_layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_N, D_ROPE], kr_layout)
    p_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_M, BLOCK_N], p_layout)
    stage_s = gl.allocate_shared_memory(gl.float8e4nv, [4, BLOCK_N, COLS], _smem8())
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sc_s = gl.allocate_shared_memory(gl.float32, [2, BLOCK_N], flat)
    idx_s = gl.allocate_shared_memory(gl.int32, [4, BLOCK_N], flat)
    stats = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], flat)
    bars = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    q_ready = bars.index(0)
    free0 = bars.index(1)
    free1 = bars.index(2)
    got_a = bars.index(3)
    got_b = bars.index(4)
    got_pa = bars.index(5)
    stats_free = bars.index(6)
    for i in gl.static_range(7):
        mbarrier.init(bars.index(i), count=1)
    fence_async_shared()

    # two partitions of one warpgroup each (a third would cap every thread's registers below what the
    # accumulators need: see mla_decode_ws)
    # (the argument list is spelled out twice: a tuple built once and extended with C fails to compile in 3.6)
    gl.warp_specialize([
        (_consumer, (0, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, p_s, stage_s, sc_s, idx_s, stats, q_ready, free0,
                     free1, got_a, got_b, got_pa, stats_free, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr,
                     blocks_ptr, rope_ptr, scales_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, batch,
                     num_heads, num_tiles, num_splits, layer_idx, qk_scale, pool_rows, topk, stride_o_t,
                     stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_t, stride_po_h, stride_pl_s,
                     stride_pl_t, stride_idx_t, stride_idx_k, stride_b_b, stride_b_l, stride_b_s, stride_r_b,
                     stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s, PAGE_SIZE, ROPE_OFF, FOLD,
                     HAS_SINK, SPLIT)),
        (_consumer, (1, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, p_s, stage_s, sc_s, idx_s, stats, q_ready, free0,
                     free1, got_a, got_b, got_pa, stats_free, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr,
                     blocks_ptr, rope_ptr, scales_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, batch,
                     num_heads, num_tiles, num_splits, layer_idx, qk_scale, pool_rows, topk, stride_o_t,
                     stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_t, stride_po_h, stride_pl_s,
                     stride_pl_t, stride_idx_t, stride_idx_k, stride_b_b, stride_b_l, stride_b_s, stride_r_b,
                     stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s, PAGE_SIZE, ROPE_OFF, FOLD,
                     HAS_SINK, SPLIT)),
    ], [4], [CONSUMER_REGS])
