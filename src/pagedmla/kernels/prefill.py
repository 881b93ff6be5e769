"""Prefill kernels: the chunk plan on the device, the latent-cache gather of decompression (its GEMM is
cuBLAS), and ragged FlashAttention over one decompressed chunk with the rope columns read from the cache."""

import triton
import triton.language as tl

from .common import dot, load_or_zero, mask_visible, ragged_count, ragged_search, visible_range
from .fp8 import _cast

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _prefill_plan_kernel(
    offsets_ptr, cache_lengths_ptr, bro_ptr, co_ptr, lengths_ptr,
    batch, page_size, buffer_size, max_chunks,
    BLOCK_C: tl.constexpr, BLOCK_B: tl.constexpr,
):
    """Chunks [pid*BLOCK_C, +BLOCK_C) of the plan: the page-aligned totals laid end to end, cut every
    buffer_size rows. Each program recomputes the running total over the batch (cheap, and no host sync)."""
    c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = c < max_chunks
    chunk_start = c.to(tl.int64) * buffer_size
    c_row = c.to(tl.int64) * (batch + 1)
    tl.store(bro_ptr + c_row, tl.zeros_like(c), mask=c_ok)
    carry = tl.zeros((), dtype=tl.int64)
    start = 0
    # a while loop: the trip count is a runtime value (see kernels.common.ragged_search)
    while start < batch:
        i = start + tl.arange(0, BLOCK_B)
        ok = i < batch
        new = tl.load(offsets_ptr + i + 1, mask=ok, other=0) - tl.load(offsets_ptr + i, mask=ok, other=0)
        total = tl.load(cache_lengths_ptr + i, mask=ok, other=0).to(tl.int64) + new
        aligned = tl.where(ok, (total + page_size - 1) // page_size * page_size, 0)
        end = tl.cumsum(aligned, 0) + carry
        begin = end - aligned
        both = c_ok[:, None] & ok[None, :]
        bro = tl.minimum(tl.maximum(end[None, :] - chunk_start[:, None], 0), buffer_size)
        co = tl.maximum(chunk_start[:, None] - begin[None, :], 0)
        tl.store(bro_ptr + c_row[:, None] + i[None, :] + 1, bro.to(tl.int32), mask=both)
        tl.store(co_ptr + (c_row - c)[:, None] + i[None, :], co.to(tl.int32), mask=both)
        carry += tl.sum(aligned, 0)
        start += BLOCK_B
    num_chunks = (carry + buffer_size - 1) // buffer_size
    length = tl.minimum(tl.maximum(carry - chunk_start, 0), buffer_size)
    tl.store(lengths_ptr + c, tl.where(c < num_chunks, length, -1).to(tl.int32), mask=c_ok)


@triton.jit
def _gather_latent_kernel(
    bro_ptr, co_ptr, lookup_ptr, blocks_ptr, scales_ptr, latent_ptr,
    num_rows, batch, layer_idx, page_size, max_pages, num_blocks,
    stride_lt_b, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l, stride_sc_s, stride_lat_r,
    RANK: tl.constexpr, BLOCK_RANK: tl.constexpr, BLOCK_R: tl.constexpr, GROUP: tl.constexpr,
    SCALED: tl.constexpr, SEARCH_STEPS: tl.constexpr, INTERPRET: tl.constexpr,
):
    """latent[r] = columns [0, RANK) of the cache row behind buffer row r, in latent's dtype (FP8 rows
    dequantize: x[d] * scale[d // GROUP]), rounded to nearest (`fp8._cast`: the interpreter would truncate to
    bf16).

    Sources are clamped exactly as the reference clamps them: rows past the last sequence stay with it, pages
    past the table and block ids outside the pool read block 0.
    """
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = r < num_rows
    seq = tl.minimum(ragged_search(bro_ptr, tl.where(r_ok, r, 0), batch, SEARCH_STEPS, 1, 0), batch - 1)
    pos = r - tl.load(bro_ptr + seq) + tl.load(co_ptr + seq)
    page = tl.minimum(tl.maximum(pos // page_size, 0), max_pages - 1)
    block = tl.load(lookup_ptr + seq.to(tl.int64) * stride_lt_b + page, mask=r_ok, other=0)
    block = tl.where((block >= 0) & (block < num_blocks), block, 0).to(tl.int64)
    slot = pos % page_size
    d = tl.arange(0, BLOCK_RANK)
    ok = r_ok[:, None] & (d < RANK)[None, :]
    rows = block * stride_blk_b + layer_idx * stride_blk_l + slot * stride_blk_s
    x = tl.load(blocks_ptr + rows[:, None] + d[None, :], mask=ok, other=0.0)
    if SCALED:
        srows = block * stride_sc_b + layer_idx * stride_sc_l + slot * stride_sc_s
        x = x.to(tl.float32) * tl.load(scales_ptr + srows[:, None] + (d // GROUP)[None, :], mask=ok, other=0.0)
    tl.store(latent_ptr + r.to(tl.int64)[:, None] * stride_lat_r + d[None, :],
             _cast(x, latent_ptr.dtype.element_ty, INTERPRET), mask=ok)


@triton.jit
def _attend_block(
    acc, m_i, l_i, start, rope_block, q_nope, q_rope, q_abs,
    k_ptr, v_ptr, blocks_ptr, scales_ptr, key_row0, key_pos0, num_valid, num_keys,
    layer_idx, window, qk_scale, rope_start,
    stride_k_r, stride_v_r, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l, stride_sc_s,
    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, D_V: tl.constexpr,
    BLOCK_DN: tl.constexpr, BLOCK_DR: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK: tl.constexpr, MASKED: tl.constexpr, PAGE_SIZE: tl.constexpr, GROUP: tl.constexpr,
    SCALED: tl.constexpr, INTERPRET: tl.constexpr,
):
    """One key block [start, start + BLOCK_N) of the online softmax. MASKED blocks apply the mask and the
    bounds (and load nothing past them: unused cache slots may hold NaN); unmasked blocks are fully visible.
    `rope_block`: the cache blocks of the block's keys (`_rope_blocks`, loaded an iteration ahead)."""
    j = start + tl.arange(0, BLOCK_N)
    k_pos = key_pos0 + j
    dn = tl.arange(0, BLOCK_DN)
    dv = tl.arange(0, BLOCK_DV)
    key_rows = (key_row0 + j).to(tl.int64)
    # masks only where needed: bounds in MASKED blocks, head-size padding when the sizes are not powers of two
    j_ok = j < num_valid
    if MASKED:
        kn_mask = j_ok[None, :] & (dn < D_NOPE)[:, None]
        v_mask = j_ok[:, None] & (dv < D_V)[None, :]
    else:
        kn_mask = (dn < D_NOPE)[:, None] if BLOCK_DN != D_NOPE else None
        v_mask = (dv < D_V)[None, :] if BLOCK_DV != D_V else None
    # K^T tile [BLOCK_DN, BLOCK_N]
    kn = load_or_zero(k_ptr + key_rows[None, :] * stride_k_r + dn[:, None], kn_mask)
    s = dot(q_nope, kn, tl.zeros((q_nope.shape[0], BLOCK_N), dtype=tl.float32), INTERPRET,
            q_nope.dtype == tl.float32)
    if D_ROPE > 0:
        # rope columns of the keys, read from the paged cache (shared by every head)
        dr = tl.arange(0, BLOCK_DR)
        block = rope_block
        if MASKED:
            kr_mask = j_ok[None, :] & (dr < D_ROPE)[:, None]
        else:
            kr_mask = (dr < D_ROPE)[:, None] if BLOCK_DR != D_ROPE else None
        slot = k_pos % PAGE_SIZE
        rows = block * stride_blk_b + layer_idx * stride_blk_l + slot * stride_blk_s + rope_start
        kr = load_or_zero(blocks_ptr + rows[None, :] + dr[:, None], kr_mask)
        if SCALED:
            srows = block * stride_sc_b + layer_idx * stride_sc_l + slot * stride_sc_s
            kr = kr.to(tl.float32) * load_or_zero(scales_ptr + srows[None, :] + ((rope_start + dr) // GROUP)[:, None],
                                                   kr_mask)
        s = dot(q_rope, kr.to(q_rope.dtype), s, INTERPRET, q_rope.dtype == tl.float32)
    # (Folding qk_scale into the exponent's FMA, with the running max taken on the raw logits, took the sm_90a
    # unmasked loop from 803 to 740 instructions but measured 4-6% slower on the H200 at every prefill shape of
    # BENCHMARKS.md: not done. Computing one exponential in four with a cubic on the FMA pipe instead of MUFU
    # measured 1-2.5% slower at 128 heads: not done either.)
    s = s * qk_scale
    if MASKED:
        vis = mask_visible(q_abs[:, None], k_pos[None, :], num_keys, MASK, window) & j_ok[None, :]
        s = tl.where(vis, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    if MASKED:
        # a row with nothing visible yet keeps m = -inf; shift by 0 so exp2 gives 0, never NaN
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    p = tl.math.exp2(s - m_use[:, None])
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = load_or_zero(v_ptr + key_rows[:, None] * stride_v_r + dv[None, :], v_mask)
    acc = dot(p.to(v.dtype), v, acc * alpha[:, None], INTERPRET, v.dtype == tl.float32)
    return acc, m_new, l_i


@triton.jit
def _rope_blocks(lookup_row_ptr, key_pos0, start, num_valid, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Cache blocks of keys [start, start + BLOCK_N) (0 past num_valid). The loop loads them one block ahead:
    rope rows whose addresses wait on a table load of the same iteration are copied only after it, too late to
    overlap the block before."""
    j = start + tl.arange(0, BLOCK_N)
    return tl.load(lookup_row_ptr + (key_pos0 + j) // PAGE_SIZE, mask=j < num_valid, other=0).to(tl.int64)


@triton.jit
def _attend_range(
    acc, m_i, l_i, lo, hi, q_nope, q_rope, q_abs,
    k_ptr, v_ptr, blocks_ptr, scales_ptr, lookup_row_ptr, key_row0, key_pos0, num_valid, num_keys,
    layer_idx, window, qk_scale, rope_start,
    stride_k_r, stride_v_r, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l, stride_sc_s,
    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, D_V: tl.constexpr,
    BLOCK_DN: tl.constexpr, BLOCK_DR: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK: tl.constexpr, MASKED: tl.constexpr, PAGE_SIZE: tl.constexpr, GROUP: tl.constexpr,
    SCALED: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Key blocks starting at lo, lo + BLOCK_N, ... below hi. Compiled: a pipelined for loop. Interpreted: a
    while loop (with NumPy >= 2.4 the interpreter cannot take a runtime bound in range())."""
    next_block = _rope_blocks(lookup_row_ptr, key_pos0, lo, num_valid, PAGE_SIZE, BLOCK_N)
    if INTERPRET:
        start = lo
        while start < hi:
            block = next_block
            next_block = _rope_blocks(lookup_row_ptr, key_pos0, start + BLOCK_N, num_valid, PAGE_SIZE, BLOCK_N)
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, start, block, q_nope, q_rope, q_abs, k_ptr, v_ptr, blocks_ptr, scales_ptr, key_row0,
                key_pos0, num_valid, num_keys, layer_idx, window, qk_scale, rope_start,
                stride_k_r, stride_v_r, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l,
                stride_sc_s, D_NOPE, D_ROPE, D_V, BLOCK_DN, BLOCK_DR, BLOCK_DV, BLOCK_N, MASK, MASKED,
                PAGE_SIZE, GROUP, SCALED, INTERPRET)
            start += BLOCK_N
    else:
        for start in range(lo, hi, BLOCK_N):
            block = next_block
            next_block = _rope_blocks(lookup_row_ptr, key_pos0, start + BLOCK_N, num_valid, PAGE_SIZE, BLOCK_N)
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, start, block, q_nope, q_rope, q_abs, k_ptr, v_ptr, blocks_ptr, scales_ptr, key_row0,
                key_pos0, num_valid, num_keys, layer_idx, window, qk_scale, rope_start,
                stride_k_r, stride_v_r, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l,
                stride_sc_s, D_NOPE, D_ROPE, D_V, BLOCK_DN, BLOCK_DR, BLOCK_DV, BLOCK_N, MASK, MASKED,
                PAGE_SIZE, GROUP, SCALED, INTERPRET)
    return acc, m_i, l_i


@triton.jit
def _mla_prefill_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, lse_ptr,
    bro_ptr, co_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, blocks_ptr, scales_ptr,
    batch, num_heads, layer_idx, window, qk_scale, rope_start,
    stride_q_t, stride_q_h, stride_k_r, stride_k_h, stride_v_r, stride_v_h,
    stride_o_t, stride_o_h, stride_o_d, stride_lse_t, stride_lse_h, stride_lt_b,
    stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l, stride_sc_s,
    D_NOPE: tl.constexpr, D_ROPE: tl.constexpr, D_V: tl.constexpr,
    BLOCK_DN: tl.constexpr, BLOCK_DR: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, PAGE_SIZE: tl.constexpr,
    GROUP: tl.constexpr, SCALED: tl.constexpr, SEARCH_CHUNKS: tl.constexpr, SEARCH_BLOCK: tl.constexpr,
    INTERPRET: tl.constexpr, HEADS_INNER: tl.constexpr,
):
    """Program (tile slot, head). Sequence b owns tile slots [offsets[b] // BLOCK_M + b, offsets[b+1] // BLOCK_M
    + b + 1), at least ceil(n_b / BLOCK_M) of them, so the grid `T // BLOCK_M + B` needs no host sync; within a
    sequence the last (for causal masks the heaviest) query tile runs first. HEADS_INNER: a 1-D grid whose
    program ids walk every head of a slot before the next slot, so the heaviest tiles of all heads start first
    and the last wave holds light tiles; else a 2-D grid (slot, head)."""
    if HEADS_INNER:
        slot_id = tl.program_id(0) // num_heads
        head = tl.program_id(0) % num_heads
    else:
        slot_id = tl.program_id(0)
        head = tl.program_id(1)
    found = ragged_count(offsets_ptr, slot_id, batch, SEARCH_CHUNKS, SEARCH_BLOCK, BLOCK_M, 1)
    b = tl.minimum(found, batch - 1)
    q_begin = tl.load(offsets_ptr + b)
    num_q = tl.load(offsets_ptr + b + 1) - q_begin
    tile = tl.cdiv(num_q, BLOCK_M) - 1 - (slot_id - (q_begin // BLOCK_M + b))
    # idle slots (past the batch, or past their sequence's tiles) run no key block and store nothing
    active = (found < batch) & (tile >= 0)
    cache_len = tl.load(cache_lengths_ptr + b)
    num_keys = cache_len + num_q
    key_row0 = tl.load(bro_ptr + b)
    key_pos0 = tl.load(co_ptr + b)
    # keys usable at all: buffer rows of b that hold positions < N_b
    num_valid = tl.minimum(tl.load(bro_ptr + b + 1) - key_row0, num_keys - key_pos0)
    num_valid = tl.where(active, num_valid, 0)

    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = (rows < num_q) & active
    q_abs = cache_len + rows
    q_first = cache_len + tile * BLOCK_M
    q_last = cache_len + tl.minimum(tile * BLOCK_M + BLOCK_M, num_q) - 1
    # every mask gives each query an interval of keys whose ends never decrease with the query, so
    # [lo(first), hi(last)) holds every visible key of the tile and [lo(last), hi(first)) only visible keys
    lo_first, hi_first = visible_range(q_first, num_keys, MASK, window)
    lo_last, hi_last = visible_range(q_last, num_keys, MASK, window)
    lo = tl.maximum(lo_first - key_pos0, 0)
    hi = tl.maximum(tl.minimum(hi_last - key_pos0, num_valid), lo)
    full_lo = tl.maximum(lo_last - key_pos0, lo)
    full_hi = tl.minimum(hi_first - key_pos0, hi)
    # masked blocks [lo, a), unmasked [a, z), masked [z, hi); a and z sit on block edges counted from lo
    a = lo + tl.cdiv(full_lo - lo, BLOCK_N) * BLOCK_N
    z = a + tl.maximum(full_hi - a, 0) // BLOCK_N * BLOCK_N
    has_full = z > a
    a = tl.where(has_full, a, hi)
    z = tl.where(has_full, z, hi)

    q_rows = q_ptr + (q_begin + rows).to(tl.int64)[:, None] * stride_q_t + head * stride_q_h
    dn = tl.arange(0, BLOCK_DN)
    q_nope = tl.load(q_rows + dn[None, :], mask=row_ok[:, None] & (dn < D_NOPE)[None, :], other=0.0)
    dr = tl.arange(0, BLOCK_DR)
    q_rope = tl.load(q_rows + D_NOPE + dr[None, :], mask=row_ok[:, None] & (dr < D_ROPE)[None, :],
                     other=0.0)
    k_head = k_ptr + head * stride_k_h
    v_head = v_ptr + head * stride_v_h
    lookup_row = lookup_ptr + b.to(tl.int64) * stride_lt_b

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    # the masked blocks [lo, a), the fully visible ones [a, z), the masked ones [z, hi)
    for part in tl.static_range(3):
        acc, m_i, l_i = _attend_range(
            acc, m_i, l_i, lo if part == 0 else (a if part == 1 else z), a if part == 0 else (z if part == 1 else hi),
            q_nope, q_rope, q_abs, k_head, v_head, blocks_ptr, scales_ptr, lookup_row,
            key_row0, key_pos0, num_valid, num_keys, layer_idx, window, qk_scale, rope_start,
            stride_k_r, stride_v_r, stride_blk_b, stride_blk_l, stride_blk_s, stride_sc_b, stride_sc_l,
            stride_sc_s, D_NOPE, D_ROPE, D_V, BLOCK_DN, BLOCK_DR, BLOCK_DV, BLOCK_N, MASK, part != 1, PAGE_SIZE,
            GROUP, SCALED, INTERPRET)

    has_key = l_i > 0.0
    l_safe = tl.where(has_key, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(has_key, (m_i + tl.math.log2(l_safe)) * LN2, float("-inf"))
    dv = tl.arange(0, BLOCK_DV)
    o_rows = out_ptr + (q_begin + rows).to(tl.int64)[:, None] * stride_o_t + head * stride_o_h
    tl.store(o_rows + dv[None, :] * stride_o_d, out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (dv < D_V)[None, :])
    tl.store(lse_ptr + (q_begin + rows).to(tl.int64) * stride_lse_t + head * stride_lse_h, lse, mask=row_ok)
