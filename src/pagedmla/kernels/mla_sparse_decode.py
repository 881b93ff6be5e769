"""Sparse (top-k) MLA decode kernels, DeepSeek-V3.2 style: the gather-attention kernel and the split combine.

Work decomposition. A *group* is one query token (each token has its own index row) or, with
`fold_shared_index`, one sequence (all its tokens share the first token's index row, so each gathered key row
serves every token of the sequence). The rows of a group are its `n * H` (query token, head) pairs flattened
as `i = s * H + h`; a program owns a tile of `BLOCK_M` consecutive rows, so each gathered key row is read once
for all heads of the tile. Along the keys, the group's index list (the main stream's first `topk_lengths[b]`
columns, then the extra stream's first `extra_topk_lengths[b]`) is cut into blocks of `BLOCK_N` indices and
the blocks are shared evenly by `num_splits` programs (grid axis 1). With one split the program finishes the
rows (sink, normalization) and writes `out` and `lse`; with several it writes a normalized partial and its
LSE, and `_mla_sparse_decode_combine_kernel` merges the partials.

Index entries: `-1` skips, ids outside `[0, num_blocks * page_size)` are never dereferenced, columns past the
sequence's length are never loaded. Key rows are gathered as two tiles (`KV_LORA_RANK` latent columns, which
also serve as V, and `ROPE_DIM` rope columns) and dequantized in registers.

Scale modes of a tile (`*_MODE`, chosen on the host from the cache's scales): 0 no scales (bf16/fp16/fp32
cache, or the rope-aware row's bf16 rope); 1 one scale per key row for the whole tile (the rope-aware latent,
or a group that covers the tile): the raw FP8 values go to the MMA and the scale multiplies the logits' and
P's columns instead; 2 `NG` groups of `GS` columns, dequantized through a `[BLOCK_N, NG, GS]` view;
3 any other granularity: each element loads its own scale (correct, but register-hungry: a fallback).

Performance notes (H200, Triton 3.6, see benchmarks/sparse_probe.py): the compiler pipelines the gathers as
asynchronous copies, but a gather whose addresses come from an index loaded in the same iteration is issued only
after that load, so `PREFETCH_INDICES` loads each block's indices one iteration ahead: a third faster at 16-row
tiles, slower at 64-row tiles, where the deeper pipeline's buffers and registers spill. With 64-row tiles both
warpgroups compute the whole `[64, BLOCK_N]` logits tile (each needs all of P for its half of `P @ V`), so QK^T
is done twice. e4m3 tiles convert to bf16 with `pagedmla.kernels.fp8._e4m3_to_bf16`.

Softmax runs in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernels in natural log.
"""

import triton
import triton.language as tl

from .common import dot, gdc_launch_dependents, gdc_wait, ragged_search, split_logits
from .fp8 import _cast, _dequant, _load_scales, _softmax_update

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _load_indices(idx_row, stride_idx_k, c0, count, BLOCK_N: tl.constexpr):
    """Index columns `[c0, c0 + BLOCK_N)` of a row; columns at or past `count` may hold anything and are never
    loaded (they read as -1)."""
    cols = c0 + tl.arange(0, BLOCK_N)
    return tl.load(idx_row + cols.to(tl.int64) * stride_idx_k, mask=cols < count, other=-1)


@triton.jit
def _block_indices(idx_row, stride_idx_k, j, count, next_ids, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):
    """(block j's indices, the ones to carry to block j + 1): with PREFETCH the carried ones, and block j + 1's
    loaded now; else loaded here, and the carried value passes through."""
    if PREFETCH:
        return next_ids, _load_indices(idx_row, stride_idx_k, (j + 1) * BLOCK_N, count, BLOCK_N)
    else:
        return _load_indices(idx_row, stride_idx_k, j * BLOCK_N, count, BLOCK_N), next_ids


@triton.jit
def _gather(ids, blocks_ptr, rope_ptr, scales_ptr, layer_idx, page_size, pool_rows,
            stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l,
            stride_s_s, KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, ROPE_OFF: tl.constexpr,
            G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, ROPE_MODE: tl.constexpr,
            ROPE_NG: tl.constexpr, BLOCK_N: tl.constexpr):
    """Raw rows (and their scales) of `BLOCK_N` physical row ids: (valid, latent tile, rope tile, scales x 2)."""
    # -1 and ids outside the pool are never dereferenced: their loads are masked (the clamp only keeps the
    # address arithmetic in range)
    ok = (ids >= 0) & (ids < pool_rows)
    ids = tl.minimum(tl.maximum(ids, 0), pool_rows - 1)
    blk = (ids // page_size).to(tl.int64)
    slot = (ids % page_size).to(tl.int64)
    layer = layer_idx.to(tl.int64)
    row = blk * stride_b_b + layer * stride_b_l + slot * stride_b_s
    row_r = blk * stride_r_b + layer * stride_r_l + slot * stride_r_s
    k_lat = tl.load(blocks_ptr + row[:, None] + tl.arange(0, KV_LORA_RANK)[None, :], mask=ok[:, None],
                    other=0.0)  # [BLOCK_N, KV_LORA_RANK], also V
    k_rope = tl.load(rope_ptr + row_r[:, None] + ROPE_OFF + tl.arange(0, ROPE_DIM)[None, :], mask=ok[:, None],
                     other=0.0)  # [BLOCK_N, ROPE_DIM]
    srow = scales_ptr + blk * stride_s_b + layer * stride_s_l + slot * stride_s_s
    s_lat = _load_scales(srow, ok, 0, KV_LORA_RANK, G, LAT_MODE, LAT_NG, BLOCK_N)
    s_rope = _load_scales(srow, ok, KV_LORA_RANK, ROPE_DIM, G, ROPE_MODE, ROPE_NG, BLOCK_N)
    return ok, k_lat, k_rope, s_lat, s_rope


@triton.jit
def _attend_block(
    acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, ok, k_lat, k_rope, s_lat, s_rope, opaque,
    KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr,
    LAT_GS: tl.constexpr, ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr,
    SPLIT_QS: tl.constexpr, CD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    INTERPRET: tl.constexpr, IEEE: tl.constexpr,
):
    """One gathered block: QK^T, online softmax update of (acc, m_i, l_i), P @ V. 64-row tiles keep the logits'
    MMAs out of a dot chain (`split_logits`; `opaque`: a finite runtime float)."""
    k_lat = _dequant(k_lat, s_lat, KV_LORA_RANK, LAT_MODE, LAT_NG, LAT_GS, BLOCK_N, CD, INTERPRET)
    k_rope = _dequant(k_rope, s_rope, ROPE_DIM, ROPE_MODE, ROPE_NG, ROPE_GS, BLOCK_N, CD, INTERPRET)
    zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if BLOCK_M >= 64:
        zero = zero * opaque
    if LAT_MODE == 1 or ROPE_MODE == 1 or SPLIT_QS:
        s_l = dot(q_lat, tl.trans(k_lat), zero, INTERPRET, IEEE)
        if LAT_MODE == 1:
            s_l = s_l * s_lat[None, :]
        s_r = dot(q_rope, tl.trans(k_rope), zero, INTERPRET, IEEE)
        if ROPE_MODE == 1:
            s_r = s_r * s_rope[None, :]
        s = s_l * qs_lat[:, None] + s_r * qs_rope[:, None]
    elif BLOCK_M >= 64:
        s = split_logits(q_lat, k_lat, q_rope, k_rope, opaque, BLOCK_M, BLOCK_N, INTERPRET, IEEE)
        s = s * qs_lat[:, None]
    else:
        s = dot(q_rope, tl.trans(k_rope), dot(q_lat, tl.trans(k_lat), zero, INTERPRET, IEEE), INTERPRET, IEEE)
        s = s * qs_lat[:, None]
    s = tl.where(ok[None, :], s, float("-inf"))
    return _softmax_update(acc, m_i, l_i, s, k_lat, s_lat, opaque, LAT_MODE == 1, CD, INTERPRET, IEEE)


@triton.jit
def _gather_attend(
    acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, ids,
    blocks_ptr, rope_ptr, scales_ptr, layer_idx, page_size, pool_rows,
    stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s,
    KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, ROPE_OFF: tl.constexpr, G: tl.constexpr,
    LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
    ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr, SPLIT_QS: tl.constexpr,
    CD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr,
):
    """Gather the block of indices `ids` and attend to it (the compiler's pipeliner, `num_stages`, turns the
    gathers into asynchronous copies into shared memory)."""
    ok, kl, kr, sl, sr = _gather(
        ids, blocks_ptr, rope_ptr, scales_ptr,
        layer_idx, page_size, pool_rows, stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s,
        stride_s_b, stride_s_l, stride_s_s, KV_LORA_RANK, ROPE_DIM, ROPE_OFF, G, LAT_MODE, LAT_NG, ROPE_MODE,
        ROPE_NG, BLOCK_N)
    # pool_rows as a float: a runtime value the compiler cannot fold (`hide_from_dot_chain`)
    return _attend_block(acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, ok, kl, kr, sl, sr,
                         pool_rows.to(tl.float32), KV_LORA_RANK, ROPE_DIM,
                         LAT_MODE, LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, SPLIT_QS, CD, BLOCK_M, BLOCK_N,
                         INTERPRET, IEEE)


@triton.jit
def _attend_stream(
    acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, lo, hi, count, idx_row, stride_idx_k,
    blocks_ptr, rope_ptr, scales_ptr, layer_idx, page_size, pool_rows,
    stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s,
    KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, ROPE_OFF: tl.constexpr, G: tl.constexpr,
    LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
    ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr, SPLIT_QS: tl.constexpr,
    CD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Blocks `[lo, hi)` of one stream's index row (indices past block `hi` read as -1). PREFETCH loads each
    block's indices one iteration ahead, so that the gathers' addresses do not wait on an index load of the
    same iteration and the compiler issues them a stage earlier (measured on H200: 16-row tiles gain a third,
    64-row tiles lose: the extra buffers spill)."""
    count = tl.minimum(count, hi * BLOCK_N)
    next_ids = _load_indices(idx_row, stride_idx_k, lo * BLOCK_N, count if PREFETCH else 0, BLOCK_N)
    if INTERPRET:
        # the interpreter takes no runtime bounds in range()
        j = lo
        while j < hi:
            ids, next_ids = _block_indices(idx_row, stride_idx_k, j, count, next_ids, BLOCK_N, PREFETCH)
            acc, m_i, l_i = _gather_attend(
                acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, ids, blocks_ptr,
                rope_ptr, scales_ptr, layer_idx, page_size, pool_rows, stride_b_b, stride_b_l, stride_b_s,
                stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s, KV_LORA_RANK, ROPE_DIM,
                ROPE_OFF, G, LAT_MODE, LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, SPLIT_QS, CD, BLOCK_M, BLOCK_N,
                INTERPRET, IEEE)
            j += 1
    else:
        for j in range(lo, hi):
            ids, next_ids = _block_indices(idx_row, stride_idx_k, j, count, next_ids, BLOCK_N, PREFETCH)
            acc, m_i, l_i = _gather_attend(
                acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, ids, blocks_ptr,
                rope_ptr, scales_ptr, layer_idx, page_size, pool_rows, stride_b_b, stride_b_l, stride_b_s,
                stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s, KV_LORA_RANK, ROPE_DIM,
                ROPE_OFF, G, LAT_MODE, LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, SPLIT_QS, CD, BLOCK_M, BLOCK_N,
                INTERPRET, IEEE)
    return acc, m_i, l_i


@triton.jit(do_not_specialize=["batch", "num_heads", "num_tiles", "num_splits", "layer_idx", "page_size",
                               "pool_rows", "x_page_size", "x_pool_rows", "topk", "x_topk"])
def _mla_sparse_decode_kernel(
    q_ptr, q_rope_ptr, q_scale_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, offsets_ptr, sink_ptr,
    idx_ptr, topk_len_ptr, blocks_ptr, rope_ptr, scales_ptr,
    x_idx_ptr, x_topk_len_ptr, x_blocks_ptr, x_rope_ptr, x_scales_ptr,
    batch, num_heads, num_tiles, num_splits, layer_idx, qk_scale,
    page_size, pool_rows, topk, x_page_size, x_pool_rows, x_topk,
    stride_q_t, stride_q_h, stride_qr_t, stride_qr_h, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h,
    stride_po_s, stride_po_t, stride_po_h, stride_pl_s, stride_pl_t,
    stride_idx_t, stride_idx_k, stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s,
    stride_s_b, stride_s_l, stride_s_s,
    stride_xi_t, stride_xi_k, stride_xb_b, stride_xb_l, stride_xb_s, stride_xr_b, stride_xr_l, stride_xr_s,
    stride_xs_b, stride_xs_l, stride_xs_s,
    KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr, Q_ROPE_OFF: tl.constexpr, ROPE_OFF: tl.constexpr,
    G: tl.constexpr, LAT_MODE: tl.constexpr, LAT_NG: tl.constexpr, LAT_GS: tl.constexpr,
    ROPE_MODE: tl.constexpr, ROPE_NG: tl.constexpr, ROPE_GS: tl.constexpr,
    X_G: tl.constexpr, X_LAT_MODE: tl.constexpr, X_LAT_NG: tl.constexpr, X_LAT_GS: tl.constexpr,
    X_ROPE_MODE: tl.constexpr, X_ROPE_NG: tl.constexpr, X_ROPE_GS: tl.constexpr,
    FOLD: tl.constexpr, HAS_EXTRA: tl.constexpr, HAS_SINK: tl.constexpr, Q_SCALED: tl.constexpr,
    SPLIT_QS: tl.constexpr, SPLIT: tl.constexpr, SEARCH_STEPS: tl.constexpr, CD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INTERPRET: tl.constexpr, IEEE: tl.constexpr,
    PREFETCH_INDICES: tl.constexpr, PDL: tl.constexpr = False,
):
    """Program (group x row tile, split): the tile's rows against the split's share of the group's indices.
    PDL (Hopper): launched as a programmatic dependent of the kernel before it, whose end it waits for before
    reading or writing anything (see `pagedmla.kernels.mla_decode_ring`)."""
    if PDL:
        gdc_wait()
    pid = tl.program_id(0)
    split = tl.program_id(1)
    tile = pid % num_tiles
    grp = pid // num_tiles
    if FOLD:
        b = grp
        row_start = tl.load(offsets_ptr + b)
        num_q = tl.load(offsets_ptr + b + 1) - row_start
    else:
        b = ragged_search(offsets_ptr, grp, batch, SEARCH_STEPS, 1, 0)
        row_start = grp
        num_q = 1
    if tile * BLOCK_M < num_q * num_heads:
        offs_m = tile * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < num_q * num_heads
        tok = row_start + offs_m // num_heads
        head = offs_m % num_heads
        offs_d = tl.arange(0, KV_LORA_RANK)
        offs_r = tl.arange(0, ROPE_DIM)
        q_row = tok.to(tl.int64) * stride_q_t + head.to(tl.int64) * stride_q_h
        q_lat = tl.load(q_ptr + q_row[:, None] + offs_d[None, :], mask=m_ok[:, None], other=0.0).to(CD)
        qr_row = tok.to(tl.int64) * stride_qr_t + head.to(tl.int64) * stride_qr_h + Q_ROPE_OFF
        q_rope = tl.load(q_rope_ptr + qr_row[:, None] + offs_r[None, :], mask=m_ok[:, None], other=0.0).to(CD)
        qs_lat = tl.zeros([BLOCK_M], dtype=tl.float32) + qk_scale
        qs_rope = qs_lat
        if Q_SCALED:
            # FP8 q: its row scale multiplies the logits (only the latent part's in the rope-aware row)
            qs_lat = qs_lat * tl.load(q_scale_ptr + tok, mask=m_ok, other=0.0)
            if not SPLIT_QS:
                qs_rope = qs_lat

        count = tl.minimum(tl.load(topk_len_ptr + b), topk)
        num_blocks = tl.cdiv(count, BLOCK_N)
        total_blocks = num_blocks
        x_count = 0
        if HAS_EXTRA:
            x_count = tl.minimum(tl.load(x_topk_len_ptr + b), x_topk)
            total_blocks += tl.cdiv(x_count, BLOCK_N)
        blk_lo = (split * total_blocks) // num_splits
        blk_hi = ((split + 1) * total_blocks) // num_splits

        acc = tl.zeros([BLOCK_M, KV_LORA_RANK], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        idx_row = idx_ptr + row_start.to(tl.int64) * stride_idx_t
        acc, m_i, l_i = _attend_stream(
            acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, blk_lo, tl.minimum(blk_hi, num_blocks), count, idx_row,
            stride_idx_k, blocks_ptr, rope_ptr, scales_ptr, layer_idx, page_size, pool_rows,
            stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s,
            KV_LORA_RANK, ROPE_DIM, ROPE_OFF, G, LAT_MODE, LAT_NG, LAT_GS, ROPE_MODE, ROPE_NG, ROPE_GS, SPLIT_QS, CD,
            BLOCK_M, BLOCK_N, INTERPRET, IEEE, PREFETCH_INDICES)
        if HAS_EXTRA:
            x_row = x_idx_ptr + row_start.to(tl.int64) * stride_xi_t
            acc, m_i, l_i = _attend_stream(
                acc, m_i, l_i, q_lat, q_rope, qs_lat, qs_rope, tl.maximum(blk_lo, num_blocks) - num_blocks,
                tl.maximum(blk_hi, num_blocks) - num_blocks, x_count, x_row, stride_xi_k,
                x_blocks_ptr, x_rope_ptr, x_scales_ptr, layer_idx, x_page_size, x_pool_rows,
                stride_xb_b, stride_xb_l, stride_xb_s, stride_xr_b, stride_xr_l, stride_xr_s,
                stride_xs_b, stride_xs_l, stride_xs_s, KV_LORA_RANK, ROPE_DIM, ROPE_OFF, X_G,
                X_LAT_MODE, X_LAT_NG, X_LAT_GS, X_ROPE_MODE, X_ROPE_NG, X_ROPE_GS, SPLIT_QS, CD,
                BLOCK_M, BLOCK_N, INTERPRET, IEEE, PREFETCH_INDICES)

        has = l_i > 0
        lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) * LN2, float("-inf"))
        if SPLIT:
            inv = tl.where(has, 1.0 / tl.where(has, l_i, 1.0), 0.0)
            po_row = (split.to(tl.int64) * stride_po_s + tok.to(tl.int64) * stride_po_t
                      + head.to(tl.int64) * stride_po_h)
            tl.store(part_out_ptr + po_row[:, None] + offs_d[None, :], acc * inv[:, None], mask=m_ok[:, None])
            tl.store(part_lse_ptr + split.to(tl.int64) * stride_pl_s + tok.to(tl.int64) * stride_pl_t + head, lse,
                     mask=m_ok)
        else:
            denom = l_i
            if HAS_SINK:
                # the sink joins the denominator only; a +inf sink gives 0
                sink = tl.load(sink_ptr + head, mask=m_ok, other=float("-inf")) * LOG2E
                denom += tl.exp2(sink - tl.where(has, m_i, 0.0))
            inv = tl.where(has, 1.0 / tl.where(has, denom, 1.0), 0.0)
            o_row = tok.to(tl.int64) * stride_o_t + head.to(tl.int64) * stride_o_h
            tl.store(out_ptr + o_row[:, None] + offs_d[None, :],
                     _cast(acc * inv[:, None], out_ptr.dtype.element_ty, INTERPRET), mask=m_ok[:, None])
            tl.store(lse_ptr + tok.to(tl.int64) * stride_lse_t + head.to(tl.int64) * stride_lse_h, lse, mask=m_ok)


@triton.jit(do_not_specialize=["num_rows", "num_heads", "num_splits"])
def _mla_sparse_decode_combine_kernel(
    out_ptr, lse_ptr, sink_ptr, part_out_ptr, part_lse_ptr,
    num_rows, num_heads, num_splits,
    stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_t, stride_po_h, stride_pl_s,
    stride_pl_t,
    BLOCK_R: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_S: tl.constexpr, HAS_SINK: tl.constexpr,
    INTERPRET: tl.constexpr, PDL: tl.constexpr = False,
):
    """Program (rows block, columns block): merge the splits' normalized partials of rows `g * H + h` by LSE.
    PDL: launched as a programmatic dependent of the decode kernel; it waits for that kernel's writes, then lets
    the next kernel launched that way be scheduled."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_d = tl.program_id(1) * BLOCK_DV + tl.arange(0, BLOCK_DV)
    r_ok = offs_r < num_rows
    tok = (offs_r // num_heads).to(tl.int64)
    head = (offs_r % num_heads).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_S)
    ok = (offs_s[:, None] < num_splits) & r_ok[None, :]
    lse_p = tl.load(part_lse_ptr + offs_s[:, None].to(tl.int64) * stride_pl_s + (tok * stride_pl_t + head)[None, :],
                    mask=ok, other=float("-inf"))  # [BLOCK_S, BLOCK_R]
    m = tl.max(lse_p, 0)
    has = m > float("-inf")
    m_safe = tl.where(has, m, 0.0)
    weight = tl.where(ok, tl.exp(lse_p - m_safe[None, :]), 0.0)
    total = tl.sum(weight, 0)
    o_p = tl.load(part_out_ptr + offs_s[:, None, None].to(tl.int64) * stride_po_s
                  + (tok * stride_po_t + head * stride_po_h)[None, :, None] + offs_d[None, None, :],
                  mask=ok[:, :, None] & (weight[:, :, None] > 0), other=0.0)  # [BLOCK_S, BLOCK_R, BLOCK_DV]
    acc = tl.sum(weight[:, :, None] * o_p, 0)
    denom = total
    if HAS_SINK:
        sink = tl.load(sink_ptr + head, mask=r_ok, other=float("-inf"))
        denom += tl.exp(sink - m_safe)
    inv = tl.where(has, 1.0 / tl.where(has, denom, 1.0), 0.0)
    tl.store(out_ptr + (tok * stride_o_t + head * stride_o_h)[:, None] + offs_d[None, :],
             _cast(acc * inv[:, None], out_ptr.dtype.element_ty, INTERPRET), mask=r_ok[:, None])
    if tl.program_id(1) == 0:
        lse = tl.where(has, m_safe + tl.log(tl.where(has, total, 1.0)), float("-inf"))
        tl.store(lse_ptr + tok * stride_lse_t + head * stride_lse_h, lse, mask=r_ok)
