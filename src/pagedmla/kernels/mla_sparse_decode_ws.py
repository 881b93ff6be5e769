"""Warp-specialized sparse (top-k) MLA decode for Hopper, in Gluon: DeepSeek-V3.2's rope-aware FP8 cache.

The dense kernel's structure (`pagedmla.kernels.mla_decode_ws`: two 4-warp consumers, 64-row tiles of one
query token's heads, pairs of 64-key blocks split "seesaw" between them, P passed through the block's rope
columns), with the keys gathered by index instead of copied by TMA. A program is one (query token, tile of
64 heads) pair and runs the token's whole index list (`min(topk_lengths[b], topk)` columns), so it writes
`out` and `lse` itself (no partials). Each consumer gathers the blocks whose logits it computes (block a of a
pair by consumer 0, b by consumer 1), once the other consumer has released the ring slot:
- the 640-byte rows: 512 e4m3 latent bytes, converted exactly to bf16 as they are, and the bf16 rope columns;
- the row's scale (column 0 of the scales) multiplies the latent part of its logit and its column of P,
  the way the Triton kernel applies one scale per row, so the MMAs see raw values.
Index entries that are -1, outside the cache's rows, or past the sequence's length load as zero rows and are
masked in S (their scale is 0). Scope (the host checks it, else the Triton sparse kernel runs): bf16 q with
DeepSeek's dims, heads a multiple of 64, the rope-aware FP8 cache, the main index stream only, no
`fold_shared_index`. Compiled only for sm_90; tested in the gpu tier against the reference.
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

from .gluon_common import LN2, LOG2E, mma_layout
from .mla_decode_ws import BLOCK_M, BLOCK_N, COLS, D_LAT, D_ROPE, _no_inf

ROWS = gl.constexpr(16)  # key rows gathered per step
SEARCH_BLOCK = gl.constexpr(128)


@gluon.jit
def _row_offsets(idx_row, stride_idx_k, rows, n_keys, page_size, pool_rows, layer_off, stride_b, stride_s):
    """(element offset of each row's cache row, whether the row is a key): -1, out-of-pool and past-length
    entries are no key (offset 0)."""
    idx = gl.load(idx_row + rows.to(gl.int64) * stride_idx_k, mask=rows < n_keys, other=-1)
    ok = (rows < n_keys) & (idx >= 0) & (idx < pool_rows)
    idx = gl.where(ok, idx, 0)
    off = (idx // page_size).to(gl.int64) * stride_b + layer_off + (idx % page_size).to(gl.int64) * stride_s
    return off, ok


@gluon.jit
def _gather(k_s, kr_s, st, k0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, page_size, pool_rows, layer_off,
            r_layer_off, stride_b, stride_s, r_stride_b, r_stride_s):
    """Rows k0.. of the index list into ring slot st: latent bytes as bf16 (unscaled), rope columns as they are;
    rows that are no key are zero."""
    lat: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])
    rl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    cols = gl.arange(0, COLS, gl.SliceLayout(0, lat))
    rcols = gl.arange(0, D_ROPE, gl.SliceLayout(0, rl))
    for r0 in gl.static_range(0, BLOCK_N, ROWS):
        rows = k0 + r0 + gl.arange(0, ROWS, gl.SliceLayout(1, lat))
        off, ok = _row_offsets(idx_row, stride_idx_k, rows, n_keys, page_size, pool_rows, layer_off, stride_b,
                               stride_s)
        for ch in gl.static_range(2):
            x = gl.load(blocks_ptr + off[:, None] + COLS * ch + cols[None, :], mask=ok[:, None], other=0.0)
            k_s.index(st * 2 + ch).slice(r0, ROWS, dim=0).store(x.to(gl.bfloat16))
        rows = k0 + r0 + gl.arange(0, ROWS, gl.SliceLayout(1, rl))
        off, ok = _row_offsets(idx_row, stride_idx_k, rows, n_keys, page_size, pool_rows, r_layer_off, r_stride_b,
                               r_stride_s)
        x = gl.load(rope_ptr + off[:, None] + D_LAT // 2 + rcols[None, :], mask=ok[:, None], other=0.0)
        kr_s.index(st).slice(r0, ROWS, dim=0).store(x)
    fence_async_shared()  # the MMAs read shared memory through the async proxy


@gluon.jit
def _sparse_logits(q_s, qr_s, k_s, kr_s, st, k0, n_keys, idx_row, stride_idx_k, scales_ptr, page_size, pool_rows,
                   s_layer_off, s_stride_b, s_stride_s, qk_scale):
    """(scaled, masked logits S [64, 64] of slot st, each key's row scale): S = (scale * q_lat k_lat^T + q_rope
    k_rope^T) * qk_scale, -inf for no key."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s_lat = warpgroup_mma(q_s.index(0), k_s.index(st * 2).permute((1, 0)), zero, use_acc=False, is_async=True)
    s_lat = warpgroup_mma(q_s.index(1), k_s.index(st * 2 + 1).permute((1, 0)), s_lat, is_async=True)
    s_rope = warpgroup_mma(qr_s, kr_s.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    keys = k0 + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
    off, ok = _row_offsets(idx_row, stride_idx_k, keys, n_keys, page_size, pool_rows, s_layer_off, s_stride_b,
                           s_stride_s)
    sc = gl.load(scales_ptr + off, mask=ok, other=0.0)
    s_lat, s_rope = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, s_rope))
    s = (s_lat * sc[None, :] + s_rope) * qk_scale
    return gl.where(ok[None, :], s, float("-inf")), sc


@gluon.jit
def _consumer(C: gl.constexpr, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, k_empty, got_a, got_b, got_pa,
              stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr, out_ptr,
              lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b, stride_s,
              r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h, stride_lse_t,
              stride_lse_h, HAS_SINK: gl.constexpr):
    """Consumer C of the token's (g) tile of heads head0..: its role in each pair of key blocks (as the dense
    kernel's consumers), output columns [256 C, 256 C + 256). Slot 0 holds block a, slot 1 block b; consumer
    C gathers into its slot once the other consumer's P @ V on the slot's previous block is done."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(COLS)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    if C == 0:
        q_row = g * num_heads + head0
        mbarrier.expect(q_ready, 2 * q_desc.block_type.nbytes + qr_desc.block_type.nbytes)
        for ch in gl.static_range(2):
            tma.async_copy_global_to_shared(q_desc, [q_row, COLS * ch], q_ready, q_s.index(ch))
        tma.async_copy_global_to_shared(qr_desc, [q_row, D_LAT], q_ready, qr_s)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    acc = gl.zeros([BLOCK_M, COLS], gl.float32, o_layout)
    n_blocks = gl.cdiv(n_keys, BLOCK_N)
    pairs_b = 0
    mbarrier.wait(q_ready, 0)
    for j in range(gl.cdiv(n_blocks, 2)):
        ka = 2 * j * BLOCK_N
        has_b = 2 * j + 1 < n_blocks
        ph = j & 1
        if C == 0:
            mbarrier.wait(k_empty.index(0), ph ^ 1)
            _gather(k_s, kr_s, 0, ka, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, page_size, pool_rows,
                    layer_off, r_layer_off, stride_b, stride_s, r_stride_b, r_stride_s)
            s, sc = _sparse_logits(q_s, qr_s, k_s, kr_s, 0, ka, n_keys, idx_row, stride_idx_k, scales_ptr, page_size,
                                   pool_rows, s_layer_off, s_stride_b, s_stride_s, qk_scale)
            m_a = gl.maximum(m_i, gl.max(s, axis=1))
            p = gl.exp2(s - _no_inf(m_a)[:, None])
            rs_a = gl.sum(p, axis=1)
            p = p * sc[None, :]  # the row scales of the values
            mbarrier.wait(stats_free, ph ^ 1)
            stats.index(0).store(m_a)
            stats.index(1).store(rs_a)
            mbarrier.arrive(got_a)
            scale_a = gl.exp2(m_i - _no_inf(m_a))
            acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
            pv = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op_layout), k_s.index(0), acc, is_async=True)
            if has_b:
                mbarrier.wait(got_b, pairs_b & 1)
                m_b = stats.index(2).load(row_layout)
                rs_b = stats.index(3).load(row_layout)
                scale_b = gl.exp2(_no_inf(m_a) - _no_inf(m_b))
                kr_s.index(0).store((p * scale_b[:, None]).to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                acc = acc * gl.convert_layout(scale_b, o_rows)[:, None]
                pv = warpgroup_mma(kr_s.index(1), k_s.index(2), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
            else:
                kr_s.index(0).store(p.to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                l_i = l_i * scale_a + rs_a
                m_i = m_a
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            if has_b:
                mbarrier.arrive(k_empty.index(1))
        else:
            s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
            sc = gl.zeros([BLOCK_N], gl.float32, gl.SliceLayout(0, s_layout))
            if has_b:
                # block b is gathered and its logits computed while consumer 0 works on block a
                mbarrier.wait(k_empty.index(1), (pairs_b & 1) ^ 1)
                _gather(k_s, kr_s, 1, ka + BLOCK_N, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, page_size,
                        pool_rows, layer_off, r_layer_off, stride_b, stride_s, r_stride_b, r_stride_s)
                s, sc = _sparse_logits(q_s, qr_s, k_s, kr_s, 1, ka + BLOCK_N, n_keys, idx_row, stride_idx_k,
                                       scales_ptr, page_size, pool_rows, s_layer_off, s_stride_b, s_stride_s, qk_scale)
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
                kr_s.index(1).store(p_b)
                stats.index(2).store(m_b)
                stats.index(3).store(rs_b)
                fence_async_shared()
                mbarrier.arrive(got_b)
                scale_b = gl.exp2(_no_inf(m_a) - _no_inf(m_b))
                acc = acc * gl.convert_layout(scale_a * scale_b, o_rows)[:, None]
                pv = warpgroup_mma(gl.convert_layout(p_b, p_op_layout), k_s.index(3), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(kr_s.index(0), k_s.index(1), pv, is_async=True)
            else:
                acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
                l_i = l_i * scale_a + rs_a
                m_i = m_a
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(kr_s.index(0), k_s.index(1), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            mbarrier.arrive(k_empty.index(0))
        pairs_b += has_b.to(gl.int32)

    has = l_i > 0.0
    l_safe = gl.where(has, l_i, 1.0)
    lse = gl.where(has, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
    rows = gl.arange(0, BLOCK_M, row_layout)
    sink = gl.where((rows >= 0) & HAS_SINK, gl.load(sink_ptr + head0 + rows) * LOG2E, float("-inf"))
    inv = gl.where(has, 1.0 / (l_safe + gl.exp2(sink - _no_inf(m_i))), 0.0)
    out = acc * gl.convert_layout(inv, o_rows)[:, None]
    r = gl.arange(0, BLOCK_M, o_rows)
    d = COLS * C + gl.arange(0, COLS, gl.SliceLayout(0, o_layout))
    gl.store(out_ptr + g.to(gl.int64) * stride_o_t + (head0 + r).to(gl.int64)[:, None] * stride_o_h + d[None, :],
             out.to(out_ptr.dtype.element_ty))
    if C == 0:
        gl.store(lse_ptr + g.to(gl.int64) * stride_lse_t + (head0 + rows) * stride_lse_h, lse)


@gluon.jit(do_not_specialize=["batch", "num_heads", "num_tiles", "page_size", "pool_rows", "topk"])
def _mla_sparse_decode_ws_kernel(
    q_desc, qr_desc, out_ptr, lse_ptr, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr, blocks_ptr, rope_ptr, scales_ptr,
    batch, num_heads, num_tiles, page_size, pool_rows, topk, qk_scale, layer_off, r_layer_off, s_layer_off,
    stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_idx_t, stride_idx_k, stride_b, stride_s, r_stride_b,
    r_stride_s, s_stride_b, s_stride_s,
    HAS_SINK: gl.constexpr, SEARCH_CHUNKS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
):
    """Program (query token g, tile t of 64 heads). `*_layer_off`: the layer's element offset in the cache, its
    bf16 view (rope) and the scales."""
    pid = gl.program_id(0)
    g = pid // num_tiles
    head0 = (pid % num_tiles) * BLOCK_M
    # the token's sequence: b = the number of i in [1, batch] with offsets[i] <= g
    search: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    b = 0
    for ch in range(SEARCH_CHUNKS):
        i = ch * SEARCH_BLOCK + 1 + gl.arange(0, SEARCH_BLOCK, search)
        ok = i <= batch
        b += gl.sum((ok & (gl.load(offsets_ptr + i, mask=ok, other=0) <= g)).to(gl.int32), axis=0)
    n_keys = gl.minimum(gl.load(topk_len_ptr + gl.minimum(b, batch - 1)), topk)
    idx_row = idx_ptr + g.to(gl.int64) * stride_idx_t

    q_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_M, COLS], q_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, D_ROPE], qr_desc.layout)
    k_s = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_N, COLS], q_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [2, BLOCK_N, D_ROPE], qr_desc.layout)
    stats = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    one = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    q_ready = one.index(0)
    got_a = one.index(1)
    got_b = one.index(2)
    got_pa = one.index(3)
    stats_free = one.index(4)
    for i in gl.static_range(5):
        mbarrier.init(one.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(k_empty.index(i), count=1)
    fence_async_shared()

    # two partitions (see mla_decode_ws: a third would cap every thread at 168 registers)
    gl.warp_specialize([
        (_consumer, (0, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, k_empty, got_a, got_b, got_pa,
                     stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr,
                     out_ptr, lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b,
                     stride_s, r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h,
                     stride_lse_t, stride_lse_h, HAS_SINK)),
        (_consumer, (1, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, stats, q_ready, k_empty, got_a, got_b, got_pa,
                     stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr,
                     out_ptr, lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b,
                     stride_s, r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h,
                     stride_lse_t, stride_lse_h, HAS_SINK)),
    ], [4], [CONSUMER_REGS])
