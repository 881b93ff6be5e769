"""Warp-specialized sparse (top-k) MLA decode for Hopper, in Gluon: DeepSeek-V3.2's rope-aware FP8 cache.

A program is one (query token, tile of 64 heads) pair and runs the token's whole index list
(`min(topk_lengths[b], topk)` columns), so it writes `out` and `lse` itself (no partials). Two 4-warp consumers
share the work as in the dense kernel (`pagedmla.kernels.mla_decode_ws`): consumer c owns output columns
[256 c, 256 c + 256), the key blocks come in pairs (a, b), consumer 0 computes block a's logits and softmax,
consumer 1 block b's ("seesaw"), and each P reaches the other consumer through its block's rope columns.

What differs is how the keys arrive. They are gathered by index, so they cannot be copied by TMA, and a gather
that starts when its block is needed puts its latency on the critical path (an earlier version did that: 517 us
at the V3.2 shape against the Triton kernel's 374). Here a block is 32 keys and the ring has 4 slots (the dense
kernel's 144 KB as two pairs), so while one pair is computed the other pair's slots are filling:
- at the start of pair j, each consumer issues asynchronous copies (`cp.async`, no registers held) of its own
  block of pair j + 1, once the other consumer has released that slot: the 512 e4m3 latent bytes of each row
  land, as they are, in the upper half of the slot's bf16 latent tile (columns 256..511, 16 KB, exactly the
  raw block's size), the bf16 rope columns in the slot's rope tile, the row scales in a small scale tile;
- the index rows of a block are loaded one pair before its copies are issued;
- before its logits, the consumer widens its block in place: columns 0..255 are converted into the lower
  half, then columns 256..511 are read into registers, and written back over the raw bytes as bf16.
The row's scale (rope-aware rows: one per row) multiplies the latent part of its logit and its column of P, so
the MMAs see the raw e4m3 values, exactly converted. Index entries that are -1, outside the cache's rows, or
past the sequence's length copy as zero rows and are masked in S (their scale is 0).

Scope (the host checks it, else the Triton sparse kernel runs): bf16 q with DeepSeek's dims, heads a multiple
of 64, the rope-aware FP8 cache, the main index stream only, no `fold_shared_index`. Compiled only for sm_90;
tested in the gpu tier against the reference.
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
from .gluon_common import LN2, LOG2E, mma_layout
from .mla_decode_ws import BLOCK_M, COLS, D_LAT, D_ROPE, _no_inf

BLOCK_N = gl.constexpr(32)  # keys per block (a ring slot)
SEARCH_BLOCK = gl.constexpr(128)


@gluon.constexpr_function
def _lat_layout():
    """Copies of the raw latent rows `[32, 512]` bytes: 16 bytes per thread, a warp per row, rows w + 4k."""
    return gl.BlockedLayout([1, 16], [1, 32], [4, 1], [1, 0])


@gluon.constexpr_function
def _rope_layout():
    """Copies of the rope columns `[32, 64]` bf16: 16 bytes per thread."""
    return gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])


@gluon.constexpr_function
def _scale_layout():
    """Copies of the row scales `[32]` float32 (the four warps copy the same values)."""
    return gl.BlockedLayout([1], [32], [4], [0])


@gluon.constexpr_function
def _widen_layout():
    """Widening `[32, 256]` e4m3 -> bf16: 16 values per thread."""
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.jit
def _rows(idx_row, stride_idx_k, k0, n_keys, pool_rows, layout: gl.constexpr):
    """(cache row of each of the block's keys, whether it is a key) in `layout` (1-D): -1, out-of-pool and
    past-length entries are no key (row 0)."""
    keys = k0 + gl.arange(0, BLOCK_N, layout)
    idx = gl.load(idx_row + keys.to(gl.int64) * stride_idx_k, mask=keys < n_keys, other=-1)
    ok = (keys < n_keys) & (idx >= 0) & (idx < pool_rows)
    return gl.where(ok, idx, 0), ok


@gluon.jit
def _offsets(idx, page_size, layer_off, stride_b, stride_s):
    """Element offset of cache row `idx` (page idx // page_size, slot idx % page_size) in this layer."""
    return (idx // page_size).to(gl.int64) * stride_b + layer_off + (idx % page_size).to(gl.int64) * stride_s


@gluon.jit
def _index_rows(idx_row, stride_idx_k, k0, n_keys, pool_rows):
    """The block's index entries in the three copy layouts (loaded a pair before the copies are issued)."""
    il, ol = _rows(idx_row, stride_idx_k, k0, n_keys, pool_rows, gl.SliceLayout(1, _lat_layout()))
    ir, orr = _rows(idx_row, stride_idx_k, k0, n_keys, pool_rows, gl.SliceLayout(1, _rope_layout()))
    isc, osc = _rows(idx_row, stride_idx_k, k0, n_keys, pool_rows, _scale_layout())
    return il, ol, ir, orr, isc, osc


@gluon.jit
def _issue_copies(k_s, kr_s, sc_s, st, il, ol, ir, orr, isc, osc, blocks_ptr, rope_ptr, scales_ptr, page_size,
                  layer_off, r_layer_off, s_layer_off, stride_b, stride_s, r_stride_b, r_stride_s, s_stride_b,
                  s_stride_s):
    """Asynchronous copies of a block's rows into slot st: raw latent bytes into the upper half of its latent
    tile, rope columns into its rope tile, scales into its scale row (zeros for rows that are no key)."""
    raw = k_s.index(2 * st + 1)._reinterpret(gl.float8e4nv, [BLOCK_N, D_LAT],
                                             gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    cols = gl.arange(0, D_LAT, gl.SliceLayout(0, _lat_layout()))
    off = _offsets(il, page_size, layer_off, stride_b, stride_s)
    async_copy.async_copy_global_to_shared(raw, blocks_ptr + off[:, None] + cols[None, :], mask=ol[:, None])
    rcols = gl.arange(0, D_ROPE, gl.SliceLayout(0, _rope_layout()))
    off = _offsets(ir, page_size, r_layer_off, r_stride_b, r_stride_s)
    async_copy.async_copy_global_to_shared(kr_s.index(st), rope_ptr + off[:, None] + D_LAT // 2 + rcols[None, :],
                                           mask=orr[:, None])
    off = _offsets(isc, page_size, s_layer_off, s_stride_b, s_stride_s)
    async_copy.async_copy_global_to_shared(sc_s.index(st), scales_ptr + off, mask=osc)


@gluon.jit
def _e4m3_to_bf16(x):
    """e4m3 values (four consecutive per thread) as bf16, exactly (`pagedmla.kernels.fp8`)."""
    return gl.inline_asm_elementwise(E4M3X4_TO_BF16_ASM, "=r,=r,r", [x.to(gl.uint8, bitcast=True)],
                                     dtype=gl.bfloat16, is_pure=True, pack=4)


@gluon.jit
def _widen(k_s, st):
    """Slot st's raw latent bytes (upper half of its latent tile) as bf16 over the whole tile, in place."""
    raw = k_s.index(2 * st + 1)._reinterpret(gl.float8e4nv, [BLOCK_N, D_LAT],
                                             gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    low = raw.slice(0, COLS, dim=1).load(_widen_layout())
    k_s.index(2 * st).store(_e4m3_to_bf16(low))
    high = raw.slice(COLS, COLS, dim=1).load(_widen_layout())
    gl.thread_barrier()  # every raw byte is read before the bf16 values overwrite them
    k_s.index(2 * st + 1).store(_e4m3_to_bf16(high))
    fence_async_shared()  # the MMAs read shared memory through the async proxy


@gluon.jit
def _sparse_logits(q_s, qr_s, k_s, kr_s, sc_s, st, k0, n_keys, idx_row, stride_idx_k, pool_rows, qk_scale):
    """(scaled, masked logits S [64, 32] of slot st, each key's row scale): S = (scale * q_lat k_lat^T + q_rope
    k_rope^T) * qk_scale, -inf for no key."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    s_lat = warpgroup_mma(q_s.index(0), k_s.index(st * 2).permute((1, 0)), zero, use_acc=False, is_async=True)
    s_lat = warpgroup_mma(q_s.index(1), k_s.index(st * 2 + 1).permute((1, 0)), s_lat, is_async=True)
    s_rope = warpgroup_mma(qr_s, kr_s.index(st).permute((1, 0)), zero, use_acc=False, is_async=True)
    _, ok = _rows(idx_row, stride_idx_k, k0, n_keys, pool_rows, gl.SliceLayout(0, s_layout))
    sc = sc_s.index(st).load(gl.SliceLayout(0, s_layout))
    s_lat, s_rope = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, s_rope))
    s = (s_lat * sc[None, :] + s_rope) * qk_scale
    return gl.where(ok[None, :], s, float("-inf")), sc


@gluon.jit
def _p_tile(kr_s, st):
    """Slot st's rope tile `[32, 64]` viewed as P `[64, 32]` (an MMA operand once the block's logits are done)."""
    return kr_s.index(st)._reinterpret(gl.bfloat16, [BLOCK_M, BLOCK_N],
                                       gl.NVMMASharedLayout(swizzle_byte_width=64, element_bitwidth=16, rank=2))


@gluon.jit
def _consumer(C: gl.constexpr, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, sc_s, stats, q_ready, k_empty, got_a, got_b,
              got_pa, stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr,
              out_ptr, lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b,
              stride_s, r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h,
              stride_lse_t, stride_lse_h, HAS_SINK: gl.constexpr):
    """Consumer C of the token's (g) tile of heads head0..: output columns [256 C, 256 C + 256). Pair j's blocks
    a = 2j and b = 2j + 1 sit in slots 2 (j % 2) and 2 (j % 2) + 1; consumer C copies and widens block 2j + C
    (its "own" block) and computes its logits. A slot is released (k_empty) by the other consumer once its
    P @ V on the slot's block is done."""
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
    n_blocks = gl.cdiv(n_keys, BLOCK_N)
    # own block of pair 0 into slot C (fresh), and the index rows of pair 1's
    il, ol, ir, orr, isc, osc = _index_rows(idx_row, stride_idx_k, C * BLOCK_N, n_keys, pool_rows)
    if C < n_blocks:
        _issue_copies(k_s, kr_s, sc_s, C, il, ol, ir, orr, isc, osc, blocks_ptr, rope_ptr, scales_ptr, page_size,
                      layer_off, r_layer_off, s_layer_off, stride_b, stride_s, r_stride_b, r_stride_s, s_stride_b,
                      s_stride_s)
    async_copy.commit_group()
    il, ol, ir, orr, isc, osc = _index_rows(idx_row, stride_idx_k, (2 + C) * BLOCK_N, n_keys, pool_rows)

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_layout)
    acc = gl.zeros([BLOCK_M, COLS], gl.float32, o_layout)
    pairs_b = 0
    mbarrier.wait(q_ready, 0)
    for j in range(gl.cdiv(n_blocks, 2)):
        ka = 2 * j * BLOCK_N
        has_b = 2 * j + 1 < n_blocks
        ph = j & 1
        sa = 2 * (j % 2)
        sb = sa + 1
        # own block of pair j + 1: its slot was pair j - 1's, released by the other consumer
        nxt = 2 * (j + 1) + C
        if nxt < n_blocks:
            s_next = 2 * ((j + 1) % 2) + C
            mbarrier.wait(k_empty.index(s_next), (((j + 1) // 2) & 1) ^ 1)
            _issue_copies(k_s, kr_s, sc_s, s_next, il, ol, ir, orr, isc, osc, blocks_ptr, rope_ptr, scales_ptr,
                          page_size, layer_off, r_layer_off, s_layer_off, stride_b, stride_s, r_stride_b, r_stride_s,
                          s_stride_b, s_stride_s)
        async_copy.commit_group()  # (empty past the last block: one group per pair keeps the count)
        il, ol, ir, orr, isc, osc = _index_rows(idx_row, stride_idx_k, (nxt + 2) * BLOCK_N, n_keys, pool_rows)
        if C == 0:
            async_copy.wait_group(1)  # this pair's copies (the next pair's stay in flight)
            gl.thread_barrier()
            _widen(k_s, sa)
            s, sc = _sparse_logits(q_s, qr_s, k_s, kr_s, sc_s, sa, ka, n_keys, idx_row, stride_idx_k, pool_rows,
                                   qk_scale)
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
            pv = warpgroup_mma(gl.convert_layout(p.to(gl.bfloat16), p_op_layout), k_s.index(2 * sa), acc,
                               is_async=True)
            if has_b:
                mbarrier.wait(got_b, pairs_b & 1)
                m_b = stats.index(2).load(row_layout)
                rs_b = stats.index(3).load(row_layout)
                scale_b = gl.exp2(_no_inf(m_a) - _no_inf(m_b))
                _p_tile(kr_s, sa).store((p * scale_b[:, None]).to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
                acc = acc * gl.convert_layout(scale_b, o_rows)[:, None]
                pv = warpgroup_mma(_p_tile(kr_s, sb), k_s.index(2 * sb), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
            else:
                _p_tile(kr_s, sa).store(p.to(gl.bfloat16))
                fence_async_shared()
                mbarrier.arrive(got_pa)
                l_i = l_i * scale_a + rs_a
                m_i = m_a
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            if has_b:
                mbarrier.arrive(k_empty.index(sb))
        else:
            s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
            sc = gl.zeros([BLOCK_N], gl.float32, gl.SliceLayout(0, s_layout))
            if has_b:
                # block b is widened and its logits computed while consumer 0 works on block a
                async_copy.wait_group(1)
                gl.thread_barrier()
                _widen(k_s, sb)
                s, sc = _sparse_logits(q_s, qr_s, k_s, kr_s, sc_s, sb, ka + BLOCK_N, n_keys, idx_row, stride_idx_k,
                                       pool_rows, qk_scale)
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
                _p_tile(kr_s, sb).store(p_b)
                stats.index(2).store(m_b)
                stats.index(3).store(rs_b)
                fence_async_shared()
                mbarrier.arrive(got_b)
                scale_b = gl.exp2(_no_inf(m_a) - _no_inf(m_b))
                acc = acc * gl.convert_layout(scale_a * scale_b, o_rows)[:, None]
                pv = warpgroup_mma(gl.convert_layout(p_b, p_op_layout), k_s.index(2 * sb + 1), acc, is_async=True)
                l_i = l_i * scale_a * scale_b + rs_a * scale_b + rs_b
                m_i = m_b
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(_p_tile(kr_s, sa), k_s.index(2 * sa + 1), pv, is_async=True)
            else:
                acc = acc * gl.convert_layout(scale_a, o_rows)[:, None]
                l_i = l_i * scale_a + rs_a
                m_i = m_a
                mbarrier.wait(got_pa, ph)
                pv = warpgroup_mma(_p_tile(kr_s, sa), k_s.index(2 * sa + 1), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(pv,))
            mbarrier.arrive(k_empty.index(sa))
        pairs_b += has_b.to(gl.int32)
    async_copy.wait_group(0)  # no copy outlives the program

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
    # 4 slots of 32 keys: latent as two [32, 256] halves per slot, rope [32, 64], scales [32]
    k_s = gl.allocate_shared_memory(gl.bfloat16, [8, BLOCK_N, COLS], q_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [4, BLOCK_N, D_ROPE], qr_desc.layout)
    sc_s = gl.allocate_shared_memory(gl.float32, [4, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    stats = gl.allocate_shared_memory(gl.float32, [4, BLOCK_M], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    one = gl.allocate_shared_memory(gl.int64, [8, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    q_ready = one.index(0)
    got_a = one.index(1)
    got_b = one.index(2)
    got_pa = one.index(3)
    stats_free = one.index(4)
    for i in gl.static_range(5):
        mbarrier.init(one.index(i), count=1)
    for i in gl.static_range(4):
        mbarrier.init(k_empty.index(i), count=1)
    fence_async_shared()

    # two partitions (see mla_decode_ws: a third would cap every thread at 168 registers)
    gl.warp_specialize([
        (_consumer, (0, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, sc_s, stats, q_ready, k_empty, got_a, got_b, got_pa,
                     stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr,
                     out_ptr, lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b,
                     stride_s, r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h,
                     stride_lse_t, stride_lse_h, HAS_SINK)),
        (_consumer, (1, q_desc, qr_desc, q_s, qr_s, k_s, kr_s, sc_s, stats, q_ready, k_empty, got_a, got_b, got_pa,
                     stats_free, g, head0, n_keys, idx_row, stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, sink_ptr,
                     out_ptr, lse_ptr, num_heads, page_size, pool_rows, layer_off, r_layer_off, s_layer_off, stride_b,
                     stride_s, r_stride_b, r_stride_s, s_stride_b, s_stride_s, qk_scale, stride_o_t, stride_o_h,
                     stride_lse_t, stride_lse_h, HAS_SINK)),
    ], [4], [CONSUMER_REGS])
