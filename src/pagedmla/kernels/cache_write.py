"""Cache-write kernels: a GEMM whose epilogue scatters rows into the paged cache, RMS norm and rope in place.

The GEMM has two launches: `_matmul_to_cache_kernel` (one program per tile or K piece of a tile, with narrower
tail tiles) and `_matmul_to_cache_stream_kernel` (stream-K: equal spans of K blocks per program, for many rows).

Every kernel addresses the row of new token t of sequence b at absolute position `L_b + t`:
`blocks[lookup_table[b, pos // page_size], kv, layer, pos % page_size, head, :]`.
"""

import triton
import triton.language as tl

from .common import dot, ragged_search


@triton.jit
def _k_step(acc, x, w, row0, col0, k, x_rows, w_rows, K: tl.constexpr, BLOCK_K: tl.constexpr,
            USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """`acc += x[rows, k:k+BLOCK_K] @ w[cols, k:k+BLOCK_K].T`: descriptors (tile origin row0, col0) with TMA, else
    pointers with the rows' element offsets `x_rows` and the columns' `w_rows` (a partial last K block masked)."""
    if USE_TMA:
        a = x.load([row0, k])
        b = w.load([col0, k]).T
    else:
        rk = k + tl.arange(0, BLOCK_K)
        x_ptrs = x + x_rows[:, None] + rk[None, :]
        w_ptrs = w + w_rows[None, :] + rk[:, None]
        if K % BLOCK_K == 0:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            a = tl.load(x_ptrs, mask=(rk < K)[None, :], other=0.0)
            b = tl.load(w_ptrs, mask=(rk < K)[:, None], other=0.0)
    return dot(a, b, acc, INTERPRET, IEEE)


@triton.jit
def _k_loop(acc, x, w, row0, col0, k_lo, k_hi, x_rows, w_rows, K: tl.constexpr, BLOCK_K: tl.constexpr,
            USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """`acc + x[rows, k_lo:k_hi] @ w[cols, k_lo:k_hi].T` in float32 (the pipelined K loop of every tile)."""
    if INTERPRET:  # the interpreter takes no runtime bounds in range()
        k = k_lo
        while k < k_hi:
            acc = _k_step(acc, x, w, row0, col0, k, x_rows, w_rows, K, BLOCK_K, USE_TMA, IEEE, INTERPRET)
            k += BLOCK_K
    else:
        for k in range(k_lo, k_hi, BLOCK_K):
            acc = _k_step(acc, x, w, row0, col0, k, x_rows, w_rows, K, BLOCK_K, USE_TMA, IEEE, INTERPRET)
    return acc


@triton.jit
def _k_range(x, w, row0, col0, k_lo, k_hi, x_rows, w_rows, K: tl.constexpr, BLOCK_M: tl.constexpr,
             BN: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr, IEEE: tl.constexpr,
             INTERPRET: tl.constexpr):
    """`x[rows, k_lo:k_hi] @ w[cols, k_lo:k_hi].T` in float32."""
    return _k_loop(tl.zeros((BLOCK_M, BN), dtype=tl.float32), x, w, row0, col0, k_lo, k_hi, x_rows, w_rows, K,
                   BLOCK_K, USE_TMA, IEEE, INTERPRET)


@triton.jit
def _store_to_cache(acc, rm, rn, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, batch,
                    layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s,
                    stride_blk_h, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr):
    """Rows `rm` (ragged token indices) and columns `rn` of the product into their cache rows; column c goes to
    (kv c // (H*D), head c // D % H, dim c % D)."""
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
def _matmul_piece(
    x, w, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
    pid_m, col0, piece, slot, num_rows, N, batch, layer_idx, page_size,
    stride_x_m, stride_w_n, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BN: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr, USE_TMA: tl.constexpr,
    IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Piece `piece` of SPLIT of the `[BLOCK_M, BN]` tile at (pid_m * BLOCK_M, col0): its share of the K blocks.
    One piece stores straight into the cache; the pieces of a split tile store float32 partials at
    `partial_ptr + slot * SPLIT * BLOCK_M * BN` (SPLIT tiles of `[BLOCK_M, BN]`), counted by `count_ptr[slot]`,
    and the tile's last piece sums them and stores."""
    row0 = pid_m * BLOCK_M
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = col0 + tl.arange(0, BN)
    # clamped indices keep the K loop free of row/column masks (the tails are never stored)
    x_rows = tl.where(rm < num_rows, rm, 0).to(tl.int64) * stride_x_m
    w_rows = tl.where(rn < N, rn, 0).to(tl.int64) * stride_w_n
    K_PER_PIECE: tl.constexpr = ((K + BLOCK_K - 1) // BLOCK_K + SPLIT - 1) // SPLIT * BLOCK_K
    k_lo = piece * K_PER_PIECE
    k_hi = tl.minimum(k_lo + K_PER_PIECE, K)
    acc = _k_range(x, w, row0, col0, k_lo, k_hi, x_rows, w_rows, K, BLOCK_M, BN, BLOCK_K, USE_TMA, IEEE,
                   INTERPRET)
    _finish_piece(acc, rm, rn, piece, slot, partial_ptr, count_ptr, num_rows, N, blocks_ptr, offsets_ptr,
                  cache_lengths_ptr, lookup_ptr, batch, layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv,
                  stride_blk_l, stride_blk_s, stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS, BLOCK_M, BN, SPLIT)


@triton.jit
def _finish_piece(acc, rm, rn, piece, slot, partial_ptr, count_ptr, num_rows, N, blocks_ptr, offsets_ptr,
                  cache_lengths_ptr, lookup_ptr, batch, layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv,
                  stride_blk_l, stride_blk_s, stride_blk_h, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr,
                  SEARCH_STEPS: tl.constexpr, BLOCK_M: tl.constexpr, BN: tl.constexpr, SPLIT: tl.constexpr):
    """Piece `piece` of SPLIT of a tile is done (`acc`, rows rm, columns rn): a whole tile stores; the pieces of a
    split tile store float32 partials at `partial_ptr + slot * SPLIT * BLOCK_M * BN`, counted by `count_ptr[slot]`,
    and the last to arrive sums them and stores."""
    if SPLIT > 1:
        tile = tl.arange(0, BLOCK_M)[:, None] * BN + tl.arange(0, BN)[None, :]
        base = partial_ptr + slot.to(tl.int64) * (SPLIT * BLOCK_M * BN)
        tl.store(base + piece * (BLOCK_M * BN) + tile, acc)
        # every thread's partial is stored before one thread's release; the last piece's acquire sees them all
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + slot, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            acc = tl.zeros((BLOCK_M, BN), dtype=tl.float32)
            for i in tl.static_range(SPLIT):
                # summed in piece order: the result does not depend on which piece finished last
                acc += tl.load(base + i * (BLOCK_M * BN) + tile, cache_modifier=".cg")
            _store_to_cache(acc, rm, rn, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, batch,
                            layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l,
                            stride_blk_s, stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS)
    else:
        _store_to_cache(acc, rm, rn, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, batch,
                        layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s,
                        stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS)


@triton.jit
def _main_tile_with_tail_piece(
    x, w, w_tail, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
    pid_m, pid_n, main_cols, num_rows, N, batch, layer_idx, page_size,
    stride_x_m, stride_w_n, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAIL_N: tl.constexpr, BLOCK_K: tl.constexpr,
    TAIL_SPLIT: tl.constexpr, USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """Main tile (pid_m, pid_n), whole, and K piece pid_n of TAIL_SPLIT of row tile pid_m's tail tile (columns
    from main_cols). The K blocks run in order, as in every main tile (the programs of one row tile read each
    block of x together, from L2), in three loops: before the piece, the piece's blocks with both MMAs sharing
    the block of x (no second read of x), after it."""
    row0 = pid_m * BLOCK_M
    col0 = pid_n * BLOCK_N
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = col0 + tl.arange(0, BLOCK_N)
    rn2 = main_cols + tl.arange(0, TAIL_N)
    # clamped indices keep the K loops free of row/column masks (the tails are never stored)
    x_rows = tl.where(rm < num_rows, rm, 0).to(tl.int64) * stride_x_m
    w_rows = tl.where(rn < N, rn, 0).to(tl.int64) * stride_w_n
    w2_rows = tl.where(rn2 < N, rn2, 0).to(tl.int64) * stride_w_n
    K_PER_PIECE: tl.constexpr = ((K + BLOCK_K - 1) // BLOCK_K + TAIL_SPLIT - 1) // TAIL_SPLIT * BLOCK_K
    t_lo = tl.minimum(pid_n * K_PER_PIECE, K)
    t_hi = tl.minimum(t_lo + K_PER_PIECE, K)
    acc = _k_loop(tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), x, w, row0, col0, 0, t_lo, x_rows, w_rows, K,
                  BLOCK_K, USE_TMA, IEEE, INTERPRET)
    acc, acc2 = _wide_k_loop(acc, tl.zeros((BLOCK_M, TAIL_N), dtype=tl.float32), x, w, w_tail, row0, col0,
                             main_cols, t_lo, t_hi, x_rows, w_rows, w2_rows, K, BLOCK_N, TAIL_N, BLOCK_K, USE_TMA,
                             IEEE, INTERPRET)
    acc = _k_loop(acc, x, w, row0, col0, t_hi, K, x_rows, w_rows, K, BLOCK_K, USE_TMA, IEEE, INTERPRET)
    _store_to_cache(acc, rm, rn, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, batch,
                    layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s,
                    stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS)
    _finish_piece(acc2, rm, rn2, pid_n, pid_m, partial_ptr, count_ptr, num_rows, N, blocks_ptr, offsets_ptr,
                  cache_lengths_ptr, lookup_ptr, batch, layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv,
                  stride_blk_l, stride_blk_s, stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS, BLOCK_M, TAIL_N,
                  TAIL_SPLIT)


@triton.jit
def _matmul_to_cache_kernel(
    x, w, w_tail, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
    num_rows, N, batch, layer_idx, page_size,
    stride_x_m, stride_w_n, stride_lt_b,
    stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr, TAIL_N: tl.constexpr, TAIL_SPLIT_K: tl.constexpr, TAIL_IN_MAIN: tl.constexpr,
    USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """`C = x @ w.T` into the cache rows of its tokens; C is never stored anywhere else.

    Programs `[0, SPLIT_K * main tiles)` are the pieces of the `[BLOCK_M, BLOCK_N]` tiles, piece-major (the
    programs that run together share K blocks of x and w in L2). With TAIL_N > 0 the main tiles stop at the last
    full BLOCK_N column tile and the programs after them are the TAIL_SPLIT_K pieces of the `[BLOCK_M, TAIL_N]`
    tiles of the remaining columns (their weight descriptor is `w_tail`). The partials of split main tiles come
    first in `partial_ptr`, those of split tail tiles after them; `count_ptr` has one counter per split tile.

    TAIL_IN_MAIN (unsplit main tiles, one tail tile per row tile, TAIL_SPLIT_K = the main column tiles): no
    tail programs; the program of main tile (m, n) also runs K piece n of row tile m's tail tile, in the same
    pass over K (`_main_tile_with_tail_piece`), so the leftover columns add a fraction of a tile to every program
    instead of a wave of their own.

    x and w are pointers, or with USE_TMA tensor descriptors of blocks [BLOCK_M, BLOCK_K] and [BLOCK_N, BLOCK_K]
    (TMA loads; out-of-bounds rows and columns read as zero).
    """
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(num_rows, BLOCK_M)
    if TAIL_N > 0:
        main_cols = N // BLOCK_N * BLOCK_N
    else:
        main_cols = N
    num_pid_n = tl.cdiv(main_cols, BLOCK_N)
    main_tiles = num_pid_m * num_pid_n
    # split tiles' counters and partials: main tiles first (when they split), then tail tiles
    tail_counts = count_ptr
    tail_partials = partial_ptr
    if SPLIT_K > 1:
        tail_counts += main_tiles
        tail_partials += main_tiles.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
    if pid < main_tiles * SPLIT_K:
        piece = pid // main_tiles
        tile = pid % main_tiles
        # grouped order: GROUP_M row tiles share each weight tile while it is in L2
        group = GROUP_M * num_pid_n
        first_m = (tile // group) * GROUP_M
        size_m = tl.minimum(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile % group) % size_m
        pid_n = (tile % group) // size_m
        if TAIL_IN_MAIN:
            _main_tile_with_tail_piece(x, w, w_tail, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
                                       tail_partials, tail_counts, pid_m, pid_n, main_cols, num_rows, N, batch,
                                       layer_idx, page_size, stride_x_m, stride_w_n, stride_lt_b, stride_blk_b,
                                       stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h, K, NUM_HEADS,
                                       HEAD_SIZE, SEARCH_STEPS, BLOCK_M, BLOCK_N, TAIL_N, BLOCK_K, TAIL_SPLIT_K,
                                       USE_TMA, IEEE, INTERPRET)
        else:
            _matmul_piece(x, w, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
                          pid_m, pid_n * BLOCK_N, piece, tile, num_rows, N, batch, layer_idx, page_size,
                          stride_x_m, stride_w_n, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l,
                          stride_blk_s, stride_blk_h, K, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS, BLOCK_M, BLOCK_N, BLOCK_K,
                          SPLIT_K, USE_TMA, IEEE, INTERPRET)
    else:
        if TAIL_N > 0:
            tail_pid = pid - main_tiles * SPLIT_K
            tail_n = tl.cdiv(N - main_cols, TAIL_N)
            tail_tiles = num_pid_m * tail_n
            piece = tail_pid // tail_tiles
            tile = tail_pid % tail_tiles
            _matmul_piece(x, w_tail, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, tail_partials,
                          tail_counts, tile // tail_n, main_cols + (tile % tail_n) * TAIL_N, piece, tile, num_rows, N,
                          batch, layer_idx, page_size, stride_x_m, stride_w_n, stride_lt_b, stride_blk_b,
                          stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h, K, NUM_HEADS, HEAD_SIZE,
                          SEARCH_STEPS, BLOCK_M, TAIL_N, BLOCK_K, TAIL_SPLIT_K, USE_TMA, IEEE, INTERPRET)


@triton.jit
def _wide_k_step(acc, acc2, x, w, w2, row0, col0, col2, k, x_rows, w_rows, w2_rows, K: tl.constexpr,
                 BN2: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr, IEEE: tl.constexpr,
                 INTERPRET: tl.constexpr):
    """One K block of `_wide_k_loop`: x's block loaded once, multiplied with both column parts (at col0 and
    col2)."""
    if USE_TMA:
        a = x.load([row0, k])
        acc = dot(a, w.load([col0, k]).T, acc, INTERPRET, IEEE)
        if BN2 > 0:
            acc2 = dot(a, w2.load([col2, k]).T, acc2, INTERPRET, IEEE)
    else:
        rk = k + tl.arange(0, BLOCK_K)
        k_ok = (rk < K) | (K % BLOCK_K == 0)  # all true (no mask) when K blocks are whole
        a = tl.load(x + x_rows[:, None] + rk[None, :], mask=k_ok[None, :], other=0.0)
        acc = dot(a, tl.load(w + w_rows[None, :] + rk[:, None], mask=k_ok[:, None], other=0.0), acc, INTERPRET, IEEE)
        if BN2 > 0:
            acc2 = dot(a, tl.load(w2 + w2_rows[None, :] + rk[:, None], mask=k_ok[:, None], other=0.0), acc2,
                       INTERPRET, IEEE)
    return acc, acc2


@triton.jit
def _wide_k_loop(acc, acc2, x, w, w2, row0, col0, col2, k_lo, k_hi, x_rows, w_rows, w2_rows, K: tl.constexpr,
                 BN: tl.constexpr, BN2: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr,
                 IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """(acc, acc2) plus `x[rows, k_lo:k_hi] @ w[cols, k_lo:k_hi].T` for the BN columns at col0 and, with BN2 > 0,
    the BN2 at col2 (`w2`: their descriptor, or the same pointer); without BN2, acc2 is a placeholder."""
    if INTERPRET:  # the interpreter takes no runtime bounds in range()
        k = k_lo
        while k < k_hi:
            acc, acc2 = _wide_k_step(acc, acc2, x, w, w2, row0, col0, col2, k, x_rows, w_rows, w2_rows, K, BN2,
                                     BLOCK_K, USE_TMA, IEEE, INTERPRET)
            k += BLOCK_K
    else:
        for k in range(k_lo, k_hi, BLOCK_K):
            acc, acc2 = _wide_k_step(acc, acc2, x, w, w2, row0, col0, col2, k, x_rows, w_rows, w2_rows, K, BN2,
                                     BLOCK_K, USE_TMA, IEEE, INTERPRET)
    return acc, acc2


@triton.jit
def _wide_k_range(x, w, w2, row0, col0, k_lo, k_hi, x_rows, w_rows, w2_rows, K: tl.constexpr,
                  BLOCK_M: tl.constexpr, BN: tl.constexpr, BN2: tl.constexpr, BLOCK_K: tl.constexpr,
                  USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr):
    """`_wide_k_loop` from zero, the second part's columns right after the first's."""
    return _wide_k_loop(tl.zeros((BLOCK_M, BN), dtype=tl.float32),
                        tl.zeros((BLOCK_M, BN2 if BN2 > 0 else 16), dtype=tl.float32), x, w, w2, row0, col0,
                        col0 + BN, k_lo, k_hi, x_rows, w_rows, w2_rows, K, BN, BN2, BLOCK_K, USE_TMA, IEEE, INTERPRET)


@triton.jit
def _stream_row_tile(
    x, w, w2, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
    u, hi, col_tile, num_col_tiles, per_group, max_pieces, num_rows, N, batch, layer_idx, page_size, stride_x_m,
    stride_w_n, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BN: tl.constexpr, BN2: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """This program's column tile (BN + BN2 columns) of the row tile holding unit `u` (a row tile's units are its
    K blocks), over the units from u to the row tile's end or `hi`. Returns the unit after them.

    The groups that share a row tile are consecutive; for each column tile, each group's program stores its
    float32 partial in the tile's slot (`max_pieces` pieces; slots are numbered by the row tile's first group
    and column tile) and the last to arrive sums them in piece order and stores, so the result does not depend on
    the order of arrival. A part that covers the whole row tile is stored at once.
    """
    k_blocks: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    row_tile = u // k_blocks
    t_start = row_tile * k_blocks
    seg_end = tl.minimum(hi, t_start + k_blocks)
    row0 = row_tile * BLOCK_M
    col0 = col_tile * (BN + BN2)
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = col0 + tl.arange(0, BN)
    rn2 = col0 + BN + tl.arange(0, BN2 if BN2 > 0 else 16)
    # clamped indices keep the K loop free of row/column masks (the tails are never stored)
    x_rows = tl.where(rm < num_rows, rm, 0).to(tl.int64) * stride_x_m
    w_rows = tl.where(rn < N, rn, 0).to(tl.int64) * stride_w_n
    w2_rows = tl.where(rn2 < N, rn2, 0).to(tl.int64) * stride_w_n
    acc, acc2 = _wide_k_range(x, w, w2, row0, col0, (u - t_start) * BLOCK_K,
                              tl.minimum((seg_end - t_start) * BLOCK_K, K), x_rows, w_rows, w2_rows, K, BLOCK_M, BN,
                              BN2, BLOCK_K, USE_TMA, IEEE, INTERPRET)
    first_group = t_start // per_group
    num_pieces = (t_start + k_blocks - 1) // per_group - first_group + 1
    store = num_pieces == 1
    if num_pieces > 1:
        SLOT: tl.constexpr = BLOCK_M * (BN + BN2)
        # a shared row tile is the only one shared that starts in its first group's span: one slot per group
        slot = first_group * num_col_tiles + col_tile
        base = partial_ptr + slot.to(tl.int64) * max_pieces * SLOT
        offs = tl.arange(0, BLOCK_M)[:, None] * BN + tl.arange(0, BN)[None, :]
        piece = u // per_group - first_group
        tl.store(base + piece * SLOT + offs, acc)
        if BN2 > 0:
            offs2 = BLOCK_M * BN + tl.arange(0, BLOCK_M)[:, None] * BN2 + tl.arange(0, BN2)[None, :]
            tl.store(base + piece * SLOT + offs2, acc2)
        # every thread's partial is stored before one thread's release; the last piece's acquire sees them all
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + slot, 1, sem="acq_rel", scope="gpu")
        store = arrived == num_pieces - 1
        if store:
            acc = tl.load(base + offs, cache_modifier=".cg")
            if BN2 > 0:
                acc2 = tl.load(base + offs2, cache_modifier=".cg")
            i = 1
            while i < num_pieces:
                acc += tl.load(base + i * SLOT + offs, cache_modifier=".cg")
                if BN2 > 0:
                    acc2 += tl.load(base + i * SLOT + offs2, cache_modifier=".cg")
                i += 1
    if store:
        _store_to_cache(acc, rm, rn, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, batch,
                        layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s,
                        stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS)
        if BN2 > 0:
            _store_to_cache(acc2, rm, rn2, num_rows, N, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
                            batch, layer_idx, page_size, stride_lt_b, stride_blk_b, stride_blk_kv, stride_blk_l,
                            stride_blk_s, stride_blk_h, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS)
    return seg_end


@triton.jit
def _matmul_to_cache_stream_kernel(
    x, w, w2, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr, count_ptr,
    num_rows, N, batch, layer_idx, page_size, num_col_tiles, per_group, max_pieces,
    stride_x_m, stride_w_n, stride_lt_b,
    stride_blk_b, stride_blk_kv, stride_blk_l, stride_blk_s, stride_blk_h,
    K: tl.constexpr, NUM_HEADS: tl.constexpr, HEAD_SIZE: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BN2: tl.constexpr, BLOCK_K: tl.constexpr,
    USE_TMA: tl.constexpr, IEEE: tl.constexpr, INTERPRET: tl.constexpr,
):
    """`C = x @ w.T` into the cache, stream-K in groups: the programs form groups of `num_col_tiles`, one
    program per column tile of `BLOCK_N + BN2` columns (two MMAs that share each block of x). The row tiles' K
    blocks, laid end to end, are cut into equal spans of `per_group` units, one per group, so every program does
    the same number of multiply-adds (no SM waits on a second wave) and the programs of a group read the same
    blocks of x at the same time (one read from memory, the others from L2).
    """
    pid = tl.program_id(0)
    group = pid // num_col_tiles
    col_tile = pid % num_col_tiles
    total = tl.cdiv(num_rows, BLOCK_M) * tl.cdiv(K, BLOCK_K)
    u = group * per_group
    hi = tl.minimum(u + per_group, total)
    while u < hi:
        u = _stream_row_tile(x, w, w2, blocks_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, partial_ptr,
                             count_ptr, u, hi, col_tile, num_col_tiles, per_group, max_pieces, num_rows, N, batch,
                             layer_idx, page_size, stride_x_m, stride_w_n, stride_lt_b, stride_blk_b, stride_blk_kv,
                             stride_blk_l, stride_blk_s, stride_blk_h, K, NUM_HEADS, HEAD_SIZE, SEARCH_STEPS,
                             BLOCK_M, BLOCK_N, BN2, BLOCK_K, USE_TMA, IEEE, INTERPRET)


# num_tiles follows each call's longest sequence: not specialized, so a value of 1 (decode) does not compile a
# second kernel in the middle of serving or inside a CUDA-graph capture
@triton.jit(do_not_specialize=["num_tiles"])
def _rms_norm_cache_kernel(
    blocks_ptr, gamma_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr,
    layer_idx, page_size, eps, num_tiles,
    stride_lt_b, stride_blk_b, stride_blk_l, stride_blk_s,
    COLS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_T: tl.constexpr,
):
    """Program (sequence b, tile of its tokens t), `b * num_tiles + t` on a 1-D grid:
    `x <- x * rsqrt(mean(x^2) + eps) * gamma` on columns [0, COLS)."""
    pid = tl.program_id(0)
    b = pid // num_tiles
    t = pid % num_tiles * BLOCK_T + tl.arange(0, BLOCK_T)
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
