"""Cache-write kernels: a GEMM whose epilogue scatters rows into the paged cache, RMS norm and rope in place.

Every kernel addresses the row of new token t of sequence b at absolute position `L_b + t`:
`blocks[lookup_table[b, pos // page_size], kv, layer, pos % page_size, head, :]`.
"""

import triton
import triton.language as tl

from .common import dot, ragged_search


@triton.jit
def _matmul_to_cache_kernel(
    x, w, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    num_rows, col_start, N, batch, layer_idx, page_size,
    stride_x_m, stride_w_n, stride_lt_b,
    stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Columns [col_start, N) of `C = x @ w.T`, tile by tile; column c of row g goes to (kv c // (H*D),
    head c // D % H, dim c % D) of token g's cache row. C is never stored anywhere else.

    x and w are pointers, or with USE_TMA tensor descriptors of blocks [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]
    (TMA loads; out-of-bounds rows and columns read as zero).
    """
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(num_rows, BLOCK_M)
    num_pid_n = tl.cdiv(N - col_start, BLOCK_N)
    # grouped order: GROUP_M row tiles share each weight tile while it is in L2
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = col_start + pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if USE_TMA:
        for k in range(tl.cdiv(K, BLOCK_K)):
            a = x.load([pid_m * BLOCK_M, k * BLOCK_K])
            b = w.load([col_start + pid_n * BLOCK_N, k * BLOCK_K])
            acc = dot(a, b.T, acc, INTERPRET, IEEE)
    else:
        rk = tl.arange(0, BLOCK_K)
        # clamped indices keep the main loop free of row/column masks (the tails are never stored)
        rm_load = tl.where(rm < num_rows, rm, 0).to(tl.int64)
        rn_load = tl.where(rn < N, rn, 0).to(tl.int64)
        x_ptrs = x + rm_load[:, None] * stride_x_m + rk[None, :]
        w_ptrs = w + rn_load[None, :] * stride_w_n + rk[:, None]
        for k in range(tl.cdiv(K, BLOCK_K)):
            if K % BLOCK_K == 0:
                a = tl.load(x_ptrs)
                b = tl.load(w_ptrs)
            else:
                k_ok = rk < K - k * BLOCK_K
                a = tl.load(x_ptrs, mask=k_ok[None, :], other=0.0)
                b = tl.load(w_ptrs, mask=k_ok[:, None], other=0.0)
            acc = dot(a, b, acc, INTERPRET, IEEE)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K

    row_ok = rm < num_rows
    seq = tl.minimum(ragged_search(offsets_ptr, rm, batch, SEARCH_STEPS, 1, 0), batch - 1)
    pos = tl.load(cache_lengths_ptr + seq) + (rm - tl.load(offsets_ptr + seq))
    block = tl.load(lookup_ptr + seq.to(tl.int64) * stride_lt_b + pos // page_size, mask=row_ok, other=0)
    row_base = block.to(tl.int64) * stride_blk_b + layer_idx * stride_blk_l + (pos % page_size) * stride_blk_s
    col_off = ((rn // (NUM_HEADS * HEAD_SIZE)) * stride_blk_kv + (rn // HEAD_SIZE % NUM_HEADS) * stride_blk_h
               + rn % HEAD_SIZE)
    tl.store(blocks_ptr + row_base[:, None] + col_off[None, :], acc.to(blocks_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (rn < N)[None, :])


@triton.jit
def _rms_norm_cache_kernel(
    blocks_ptr, gamma_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    layer_idx, page_size, eps,
    stride_lt_b, stride_blk_b, stride_blk_l, stride_blk_s,
    COLS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr,
):
    """Program (tile of tokens t, sequence b): `x <- x * rsqrt(mean(x^2) + eps) * gamma` on columns [0, COLS)."""
    b = tl.program_id(1)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    start = tl.load(offsets_ptr + b)
    t_ok = t < tl.load(offsets_ptr + b + 1) - start
    pos = tl.load(cache_lengths_ptr + b) + t
    block = tl.load(lookup_ptr + b.to(tl.int64) * stride_lt_b + pos // page_size, mask=t_ok, other=0)
    row = block.to(tl.int64) * stride_blk_b + layer_idx * stride_blk_l + (pos % page_size) * stride_blk_s
    c = tl.arange(0, BLOCK_C)
    ok = t_ok[:, None] & (c < COLS)[None, :]
    ptrs = blocks_ptr + row[:, None] + c[None, :]
    x = tl.load(ptrs, mask=ok, other=0.0).to(tl.float32)
    gamma = tl.load(gamma_ptr + c, mask=c < COLS, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / COLS + eps)
    tl.store(ptrs, (x * inv[:, None] * gamma[None, :]).to(blocks_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rope_kernel(
    q_ptr, q_out_ptr, freqs_ptr, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    batch, layer_idx, page_size, rope_start,
    stride_q_t, stride_q_h, stride_q_d, stride_o_t, stride_o_h, stride_o_d, stride_f_p, stride_f_d, stride_lt_b,
    stride_blk_b, stride_blk_l, stride_blk_s,
    NUM_HEADS: tl.constexpr, ROPE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_H: tl.constexpr, INTERLEAVED: tl.constexpr,
):
    """Program g (one token row): rope q[g] into q_out and the cache row's columns [rope_start, +ROPE).

    Element d of a row becomes `x[d] * cos + sign * x[partner(d)] * sin` with its pair's (cos, sin): rows are
    read and written whole (contiguous), and the partner read hits the same cache lines.
    """
    g = tl.program_id(0)
    seq = ragged_search(offsets_ptr, g, batch, SEARCH_STEPS, 1, 0)
    pos = tl.load(cache_lengths_ptr + seq) + (g - tl.load(offsets_ptr + seq))
    d = tl.arange(0, BLOCK_R)
    d_ok = d < ROPE
    # interleaved pairs are (x[2i], x[2i+1]); otherwise (x[i], x[i + ROPE/2])
    if INTERLEAVED:
        pair = d // 2
        partner = d ^ 1
        first = d % 2 == 0
    else:
        pair = d % (ROPE // 2)
        partner = (d + ROPE // 2) % ROPE
        first = d < ROPE // 2
    f_row = freqs_ptr + pos.to(tl.int64) * stride_f_p
    cos = tl.load(f_row + (2 * pair) * stride_f_d, mask=d_ok, other=0.0).to(tl.float32)
    sin = tl.load(f_row + (2 * pair + 1) * stride_f_d, mask=d_ok, other=0.0).to(tl.float32)
    sin = tl.where(first, -sin, sin)

    block = tl.load(lookup_ptr + seq.to(tl.int64) * stride_lt_b + pos // page_size)
    row = (blocks_ptr + block.to(tl.int64) * stride_blk_b + layer_idx * stride_blk_l
           + (pos % page_size) * stride_blk_s + rope_start)
    k = tl.load(row + d, mask=d_ok, other=0.0).to(tl.float32)
    k_partner = tl.load(row + partner, mask=d_ok, other=0.0).to(tl.float32)
    # in place: every thread must have read its partners before any thread overwrites them
    tl.debug_barrier()
    tl.store(row + d, (k * cos + k_partner * sin).to(blocks_ptr.dtype.element_ty), mask=d_ok)

    g64 = g.to(tl.int64)
    for h0 in range(0, NUM_HEADS, BLOCK_H):
        h = h0 + tl.arange(0, BLOCK_H)
        ok = (h < NUM_HEADS)[:, None] & d_ok[None, :]
        q_row = q_ptr + g64 * stride_q_t + h[:, None] * stride_q_h
        x = tl.load(q_row + d[None, :] * stride_q_d, mask=ok, other=0.0).to(tl.float32)
        x_partner = tl.load(q_row + partner[None, :] * stride_q_d, mask=ok, other=0.0).to(tl.float32)
        y = x * cos[None, :] + x_partner * sin[None, :]
        # q_out may alias q_rope
        tl.debug_barrier()
        o_row = q_out_ptr + g64 * stride_o_t + h[:, None] * stride_o_h
        tl.store(o_row + d[None, :] * stride_o_d, y.to(q_out_ptr.dtype.element_ty), mask=ok)
