"""Warp-specialized ragged MLA prefill attention for Hopper, in Gluon (Triton's explicit-layout dialect).

The Triton kernel of `pagedmla.kernels.prefill` runs every warp through loads, MMAs and softmax in step (its
copies end in a CTA-wide barrier each block). This kernel splits the work the way FlashAttention-3 does, in two
4-warp consumer partitions of 64 query rows each: S = q k^T by warpgroup MMAs from shared memory, the online
softmax in registers, O += P V with P from registers. One consumer's softmax runs while the other's MMAs do.
Consumer 0 also issues the TMA copies: the q tile once, then each key block's keys (128 columns from `k`, 64
rope columns from a contiguous copy of the chunk's rope rows) and values into rings of STAGES buffers (keys and
values in rings of their own, each with "ready" and "empty" mbarriers). A separate 1-warp loader partition
(measured first, 0.73-0.89 of cuDNN) made Triton cap every thread at 168 registers for the whole kernel, and
ptxas serialized every warpgroup MMA.

Scope (the host checks it; anything else runs the Triton kernel): bf16 q, k, v, q/k head size 128 + 64 rope, v
128, the `null` and `causal` masks, a bf16 cache. Same program grid and sequence lookup as the Triton kernel.
Keys past a sequence's valid rows (unused cache slots may hold NaN there) are masked in S, and their value rows
are zeroed in shared memory before P @ V, so no NaN reaches the output. Compiled only for sm_90 (warpgroup MMAs);
the CPU interpreter cannot run Gluon, so this path is tested in the gpu tier.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from .gluon_common import LN2, mma_layout

D_NOPE = gl.constexpr(128)
D_ROPE = gl.constexpr(64)
D_V = gl.constexpr(128)
BLOCK_M = gl.constexpr(128)  # query rows per program: two consumers of HALF
HALF = gl.constexpr(64)


@gluon.jit
def _softmax_step(s, m_i, l_i, j0, rows_abs, row_first_abs, key_pos0, num_valid, qk_scale,
                  CAUSAL: gl.constexpr, BLOCK_N: gl.constexpr):
    """One online-softmax step on raw logits s [HALF, BLOCK_N] of buffer keys j0...: P, alpha, new m and l.
    Blocks that reach past the valid keys or (causal) past the first row's position are masked."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    s = s * qk_scale
    edge = j0 + BLOCK_N > num_valid
    if CAUSAL:
        edge = edge | (key_pos0 + j0 + BLOCK_N - 1 > row_first_abs)
    if edge:
        j = j0 + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        visible = (j < num_valid)[None, :]
        if CAUSAL:
            visible = visible & ((key_pos0 + j)[None, :] <= rows_abs[:, None])
        s = gl.where(visible, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    # rows that have seen no visible key keep m = -inf; shift them by 0 so exp2 gives 0, not NaN
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _pv(acc, p, alpha, v):
    """acc * alpha + P @ v, issued asynchronously (P from registers in bf16)."""
    o_layout: gl.constexpr = mma_layout(D_V)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return warpgroup_mma(p_op, v, acc, is_async=True)


@gluon.jit
def _zero_invalid_values(v_tile, v_clean, j0, num_valid, C: gl.constexpr, BLOCK_N: gl.constexpr):
    """Zero the value rows of buffer keys >= num_valid in this consumer's half of the tile's rows, then wait for
    the other consumer's half (P is 0 there, but 0 * NaN is NaN in P @ V). At most one block per program."""
    ROWS: gl.constexpr = BLOCK_N // 2
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    part = v_tile.slice(ROWS * C, ROWS, dim=0)
    j = j0 + ROWS * C + gl.arange(0, ROWS, gl.SliceLayout(1, layout))
    x = part.load(layout)
    part.store(gl.where((j < num_valid)[:, None], x, gl.zeros_like(x)))
    fence_async_shared()  # the MMAs read shared memory through the async proxy
    mbarrier.arrive(v_clean)
    mbarrier.wait(v_clean, 0)


@gluon.jit
def _consumer(C: gl.constexpr, qn_desc, qr_desc, k_desc, kr_desc, v_desc, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready,
              k_empty, v_ready, v_empty, v_clean, o_desc, out_ptr, lse_ptr, q_row0, row0, num_q, cache_len, key_pos0,
              num_valid, n_blocks, head, qk_scale, key_row0, q_col, k_col, v_col, stride_o_t, stride_o_h, stride_o_d,
              stride_lse_t, stride_lse_h, CAUSAL: gl.constexpr, TMA_OUT: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr):
    """Query rows [row0 + 64 C, +64) of the sequence (q rows from q_row0 + 64 C). Keys and values have rings of
    their own: a block's keys are released once its logits are done, its values once its P @ V is, so the next
    block's values can still be loading. Consumer 0 also issues the copies: q and the first STAGES blocks, then
    each block's keys or values once both consumers released its slot. Every wait for MMAs waits for all of
    them, and no MMA is in flight while registers of another are written: otherwise ptxas serializes every MMA
    of the kernel (it did, with the next block's logits issued before this block's softmax)."""
    s_layout: gl.constexpr = mma_layout(BLOCK_N)
    o_layout: gl.constexpr = mma_layout(D_V)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_first_abs = cache_len + row0 + HALF * C
    rows_abs = row_first_abs + gl.arange(0, HALF, row_layout)
    qn = qn_s.index(C)
    qr = qr_s.index(C)
    m_i = gl.full([HALF], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([HALF], gl.float32, row_layout)
    # an accumulator value from the start: the loop carries the P @ V in flight
    acc = warpgroup_mma_init(gl.zeros([HALF, D_V], gl.float32, o_layout))
    zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, s_layout)

    if C == 0:
        mbarrier.expect(q_bar, 2 * qn_desc.block_type.nbytes + 2 * qr_desc.block_type.nbytes)
        for c in gl.static_range(2):
            tma.async_copy_global_to_shared(qn_desc, [q_row0 + HALF * c, q_col], q_bar, qn_s.index(c))
            tma.async_copy_global_to_shared(qr_desc, [q_row0 + HALF * c, q_col + D_NOPE], q_bar, qr_s.index(c))
        for j in gl.static_range(STAGES):
            _load_keys(k_desc, kr_desc, kn_s, kr_s, k_ready, k_empty, j, n_blocks, key_row0, k_col, BLOCK_N, STAGES)
            _load_values(v_desc, v_s, v_ready, v_empty, j, n_blocks, key_row0, v_col, BLOCK_N, STAGES)
    mbarrier.wait(q_bar, 0)
    for i in range(n_blocks):
        # S of block i queues behind P @ V of block i - 1; both retire before this block's softmax, which runs
        # while the other consumer's MMAs do
        st = i % STAGES
        mbarrier.wait(k_ready.index(st), (i // STAGES) & 1)
        s = warpgroup_mma(qn, kn_s.index(st).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s = warpgroup_mma(qr, kr_s.index(st).permute((1, 0)), s, is_async=True)
        acc, s = warpgroup_mma_wait(num_outstanding=0, deps=(acc, s))
        mbarrier.arrive(k_empty.index(st))
        mbarrier.arrive(v_empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
        if C == 0:
            _load_keys(k_desc, kr_desc, kn_s, kr_s, k_ready, k_empty, i + STAGES, n_blocks, key_row0, k_col,
                       BLOCK_N, STAGES)
            if i > 0:
                _load_values(v_desc, v_s, v_ready, v_empty, i - 1 + STAGES, n_blocks, key_row0, v_col, BLOCK_N,
                             STAGES)
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, i * BLOCK_N, rows_abs, row_first_abs, key_pos0, num_valid,
                                           qk_scale, CAUSAL, BLOCK_N)
        mbarrier.wait(v_ready.index(st), (i // STAGES) & 1)
        if i * BLOCK_N + BLOCK_N > num_valid:
            _zero_invalid_values(v_s.index(st), v_clean, i * BLOCK_N, num_valid, C, BLOCK_N)
        acc = _pv(acc, p, alpha, v_s.index(st))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    has_key = l_i > 0.0
    l_safe = gl.where(has_key, l_i, 1.0)
    out = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    r = row0 + HALF * C + gl.arange(0, HALF, gl.SliceLayout(1, o_layout))
    if TMA_OUT and row0 + HALF * C + HALF <= num_q:
        # 64 whole rows: through the q tile's shared memory (its last MMA has retired) and one TMA store
        qn.store(out.to(gl.bfloat16))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row0 + HALF * C, head * stride_o_h], qn)
    else:
        d = gl.arange(0, D_V, gl.SliceLayout(0, o_layout))
        o_rows = (q_row0 - row0 + r).to(gl.int64)
        gl.store(out_ptr + o_rows[:, None] * stride_o_t + head * stride_o_h + d[None, :] * stride_o_d,
                 out.to(out_ptr.dtype.element_ty), mask=(r < num_q)[:, None])
    lse = gl.where(has_key, (m_i + gl.log2(l_safe)) * LN2, float("-inf"))
    rr = row0 + HALF * C + gl.arange(0, HALF, row_layout)
    lse_rows = (q_row0 + HALF * C + gl.arange(0, HALF, row_layout)).to(gl.int64)
    gl.store(lse_ptr + lse_rows * stride_lse_t + head * stride_lse_h, lse, mask=rr < num_q)
    tma.store_wait(0)


@gluon.jit
def _load_keys(k_desc, kr_desc, kn_s, kr_s, k_ready, k_empty, j, n_blocks, key_row0, k_col, BLOCK_N: gl.constexpr,
               STAGES: gl.constexpr):
    """TMA copies of block j's keys (128 columns of k, 64 rope columns) into ring slot j % STAGES, once both
    consumers released the slot's previous block (a fresh barrier passes a wait for parity 1); none past the
    last block."""
    if j < n_blocks:
        st = j % STAGES
        mbarrier.wait(k_empty.index(st), ((j // STAGES) & 1) ^ 1)
        bar = k_ready.index(st)
        mbarrier.expect(bar, k_desc.block_type.nbytes + kr_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [key_row0 + j * BLOCK_N, k_col], bar, kn_s.index(st))
        tma.async_copy_global_to_shared(kr_desc, [key_row0 + j * BLOCK_N, 0], bar, kr_s.index(st))


@gluon.jit
def _load_values(v_desc, v_s, v_ready, v_empty, j, n_blocks, key_row0, v_col, BLOCK_N: gl.constexpr,
                 STAGES: gl.constexpr):
    """TMA copy of block j's values into ring slot j % STAGES (as `_load_keys`)."""
    if j < n_blocks:
        st = j % STAGES
        mbarrier.wait(v_empty.index(st), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [key_row0 + j * BLOCK_N, v_col], v_ready.index(st), v_s.index(st))


@gluon.jit
def _prefill_ws_kernel(
    qn_desc, qr_desc, k_desc, kr_desc, v_desc, o_desc, out_ptr, lse_ptr, bro_ptr, co_ptr, offsets_ptr,
    cache_lengths_ptr, batch, qk_scale, stride_q_h, stride_k_h, stride_v_h, stride_o_t, stride_o_h, stride_o_d,
    stride_lse_t, stride_lse_h,
    CAUSAL: gl.constexpr, TMA_OUT: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
    SEARCH_CHUNKS: gl.constexpr,
    SEARCH_BLOCK: gl.constexpr, CONSUMER_REGS: gl.constexpr,
):
    """Program (tile slot, head), as `_mla_prefill_kernel`: sequence b owns tile slots [offsets[b] // 128 + b,
    offsets[b+1] // 128 + b + 1), its last (heaviest causal) query tile first; idle slots store nothing.
    TMA_OUT: `o_desc` describes out (`[T, (H - 1) * stride_o_h + 128]`, 64-row blocks); else pointer stores."""
    slot_id = gl.program_id(0)
    head = gl.program_id(1)
    # b = the number of i in [1, batch] with offsets[i] // BLOCK_M + i <= slot_id
    search: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    found = 0
    for ch in range(SEARCH_CHUNKS):
        i = ch * SEARCH_BLOCK + 1 + gl.arange(0, SEARCH_BLOCK, search)
        ok = i <= batch
        vals = gl.load(offsets_ptr + i, mask=ok, other=0) // BLOCK_M + i
        found += gl.sum((ok & (vals <= slot_id)).to(gl.int32), axis=0)
    b = gl.minimum(found, batch - 1)
    q_begin = gl.load(offsets_ptr + b)
    num_q = gl.load(offsets_ptr + b + 1) - q_begin
    tile = gl.cdiv(num_q, BLOCK_M) - 1 - (slot_id - (q_begin // BLOCK_M + b))
    active = (found < batch) & (tile >= 0)
    tile = gl.maximum(tile, 0)
    num_q = gl.where(active, num_q, 0)
    cache_len = gl.load(cache_lengths_ptr + b)
    key_row0 = gl.load(bro_ptr + b)
    key_pos0 = gl.load(co_ptr + b)
    # keys usable at all: buffer rows of b that hold positions < N_b
    num_valid = gl.minimum(gl.load(bro_ptr + b + 1) - key_row0, cache_len + num_q - key_pos0)
    num_valid = gl.maximum(gl.where(active, num_valid, 0), 0)
    row0 = tile * BLOCK_M
    hi = num_valid
    if CAUSAL:
        last_abs = cache_len + gl.minimum(row0 + BLOCK_M, num_q) - 1
        hi = gl.maximum(gl.minimum(hi, last_abs + 1 - key_pos0), 0)
    # at least one block, so every partition runs the same protocol; an empty range masks it whole
    n_blocks = gl.maximum(gl.cdiv(hi, BLOCK_N), 1)
    q_row0 = q_begin + row0

    qn_s = gl.allocate_shared_memory(gl.bfloat16, [2, HALF, D_NOPE], qn_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [2, HALF, D_ROPE], qr_desc.layout)
    kn_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_NOPE], k_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_ROPE], kr_desc.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_V], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    v_clean = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    mbarrier.init(v_clean, count=2)  # one arrival per consumer
    for st in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(st), count=1)
        mbarrier.init(v_ready.index(st), count=1)
        mbarrier.init(k_empty.index(st), count=2)
        mbarrier.init(v_empty.index(st), count=2)
    fence_async_shared()

    # two partitions of one warpgroup each (consumer 0 issues the copies): a third, loader partition would cap
    # every thread at 168 registers, and ptxas then serializes the MMAs
    gl.warp_specialize([
        (_consumer, (0, qn_desc, qr_desc, k_desc, kr_desc, v_desc, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready,
                    k_empty, v_ready, v_empty, v_clean, o_desc, out_ptr, lse_ptr, q_row0, row0, num_q, cache_len,
                    key_pos0, num_valid, n_blocks, head, qk_scale, key_row0, head * stride_q_h, head * stride_k_h,
                    head * stride_v_h, stride_o_t, stride_o_h, stride_o_d, stride_lse_t, stride_lse_h, CAUSAL,
                    TMA_OUT, BLOCK_N, STAGES)),
        (_consumer, (1, qn_desc, qr_desc, k_desc, kr_desc, v_desc, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready,
                    k_empty, v_ready, v_empty, v_clean, o_desc, out_ptr, lse_ptr, q_row0, row0, num_q, cache_len,
                    key_pos0, num_valid, n_blocks, head, qk_scale, key_row0, head * stride_q_h, head * stride_k_h,
                    head * stride_v_h, stride_o_t, stride_o_h, stride_o_d, stride_lse_t, stride_lse_h, CAUSAL,
                    TMA_OUT, BLOCK_N, STAGES)),
    ], [4], [CONSUMER_REGS])
