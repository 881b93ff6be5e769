"""Dense MLA decode for tiles of up to 16 rows (a sequence's query tokens x heads, e.g. 16 heads and one token),
in Gluon, over the split-KV schedule of `pagedmla.kernels.mla_decode`: the key rows stream through the ring of
shared-memory slots of `pagedmla.kernels.mla_sparse_decode_ring`, whose copy schedule, math and epilogue it
shares.

Why. The Triton kernel's 16-row tile leaves its copies to the compiler's pipeliner: at 16 heads it reached
82-93% of the copy ceiling (BENCHMARKS.md), the sparse ring kernel 85-99% on as many rows. Here the ring's
entries are the keys' lookup-table entries instead of top-k indices (key k of sequence b is row
`table[b, k // page_size] * page_size + k % page_size`), copied one ring depth ahead of the rows like the
indices, so no load from memory sits on the loop's critical path and any page size works. When the page size
is a multiple of the 32-key block, a block is one run of rows of one page: its page is read once (a scalar)
and the rows' addresses are that page's plus per-row constants, so the copies issue at the top of the loop.
Computing every row's address from its own entry instead put the copies after 280 instructions of address
arithmetic and took 172.0 us against 153.3 on the same rows (H200, 256 sequences of 2048 keys, 16 heads;
benchmarks/experiments/ring_pattern_ab.py, benchmarks/results/session-12/).

Work decomposition: program w is worker w of the schedule (one row tile: the launcher takes only calls whose
sequences have at most 16 rows). It walks the sequences of its span as `_mla_decode_kernel` does; for each, the
rows' visible key intervals (the mask, the span's segment) give the key blocks to stream, and S is masked by
each row's interval. A sequence the worker covers whole is finished here (sink, normalization); a piece of a
split sequence is written, normalized with its LSE, to the partial slot `2w` (the worker's first sequence) or
`2w + 1` (its last), and `mla_decode._mla_decode_combine_kernel` merges the pieces.

Scope (the launcher checks it, else the Triton kernel runs): a Hopper GPU; q and cache both bf16 or both fp16,
or a bf16 q with the rope-aware FP8 cache; DeepSeek's 512 + 64 dims; at most 16 rows per sequence.
Softmax runs in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernel in natural log.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .gluon_common import visible_range, wait_for_prior_grid
from .mla_sparse_decode_ring import (
    BLOCK_M,
    BLOCK_N,
    D_LAT,
    D_ROPE,
    _finish_scale,
    _lat_copy,
    _mma,
    _ring_buffers,
    _ring_loop,
    _ring_prologue,
    _rope_copy,
    _row_lse,
    _store_rows,
)


@gluon.jit
def _stage_q(dst, q_ptr, row_start, num_rows, num_heads, stride_q_t, stride_q_h, COL0: gl.constexpr,
             WIDTH: gl.constexpr, layout: gl.constexpr):
    """Columns `[COL0, COL0 + WIDTH)` of the sequence's rows (row r: token row_start + r // num_heads, head
    r % num_heads) into `dst` `[16, WIDTH]`; rows past num_rows are zeros."""
    r = gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    off = (row_start + r // num_heads).to(gl.int64) * stride_q_t + (r % num_heads).to(gl.int64) * stride_q_h + COL0
    cols = gl.arange(0, WIDTH, gl.SliceLayout(0, layout))
    dst.store(gl.load(q_ptr + off[:, None] + cols[None, :], mask=(r < num_rows)[:, None], other=0.0))


@gluon.jit
def _decode_sequence(b, w, first_seq, first_key, last_seq, stop_key, q_ptr, out_ptr, lse_ptr, part_out_ptr,
                     part_lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, sink_ptr, blocks_ptr, rope_ptr,
                     scales_ptr, lat_s, rope_s, sc_s, lat_bf, q_s, qr_s, idx_s, num_heads, mask_code, window,
                     qk_scale, pool_pages, layer_off, r_layer_off, s_layer_off, stride_q_t, stride_q_h, stride_o_t,
                     stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s, stride_lt_b,
                     stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE: gl.constexpr,
                     ROPE_OFF: gl.constexpr, HAS_SINK: gl.constexpr, NUM_SLOTS: gl.constexpr):
    """Worker w's piece of sequence b (`[seg_lo, seg_hi)` of its keys, from the worker's schedule row): the ring
    over the blocks its rows see, then the rows finished into `out` / `lse` (the whole sequence) or written as a
    partial to slot `2w` (b is the worker's first sequence) or `2w + 1`."""
    layout: gl.constexpr = _mma()
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    row_start = gl.load(offsets_ptr + b)
    num_q = gl.load(offsets_ptr + b + 1) - row_start
    num_keys = gl.load(cache_lengths_ptr + b) + num_q
    seg_lo = gl.where(b == first_seq, first_key, 0)
    seg_hi = gl.where(b == last_seq, gl.minimum(stop_key, num_keys), num_keys)
    num_rows = num_q * num_heads
    if (num_rows > 0) & (seg_lo < seg_hi):
        rows_ok = rows < num_rows
        tok = rows // num_heads
        heads = rows % num_heads
        vis_lo, vis_hi = visible_range(num_keys - num_q + tok, num_keys, mask_code, window)
        # rows past the sequence's get the empty interval [num_keys, 0)
        vis_lo = gl.where(rows_ok, gl.maximum(vis_lo, seg_lo), num_keys)
        vis_hi = gl.where(rows_ok, gl.minimum(vis_hi, seg_hi), 0)
        key_lo = gl.min(vis_lo, 0)
        key_hi = gl.max(vis_hi, 0)
        lo = key_lo // BLOCK_N
        hi = gl.cdiv(key_hi, BLOCK_N)
        table_row = lookup_ptr + b.to(gl.int64) * stride_lt_b
        # the previous sequence's last block is read by every warp before its slots and q are overwritten
        gl.thread_barrier()
        _ring_prologue(lat_s, rope_s, sc_s, idx_s, table_row, 0, lo, hi, key_lo, key_hi, pool_pages, blocks_ptr,
                       rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b_b, stride_b_s,
                       stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE, ROPE_OFF, NUM_SLOTS, True)
        # q while the first copies fly
        _stage_q(q_s, q_ptr, row_start, num_rows, num_heads, stride_q_t, stride_q_h, 0, D_LAT, _lat_copy())
        _stage_q(qr_s, q_ptr, row_start, num_rows, num_heads, stride_q_t, stride_q_h, D_LAT, D_ROPE,
                 _rope_copy())
        gl.thread_barrier()
        q_rope = qr_s.load(gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2))
        acc0, acc1, acc2, acc3, m_i, l_cols = _ring_loop(
            q_s, q_rope, lat_s, rope_s, sc_s, lat_bf, idx_s, table_row, 0, lo, hi, key_lo, key_hi, pool_pages,
            blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b_b, stride_b_s,
            stride_r_b, stride_r_s, stride_s_b, stride_s_s, qk_scale, num_q > 1, vis_lo, vis_hi, PAGE_SIZE,
            ROPE_OFF, NUM_SLOTS, True)

        l_i, has, lse = _row_lse(m_i, l_cols)
        if (seg_lo == 0) & (seg_hi == num_keys):
            # the whole sequence is here: finish and write out
            inv = _finish_scale(l_i, has, m_i, sink_ptr, heads, rows_ok, HAS_SINK)
            o_tok = (row_start + tok).to(gl.int64)
            _store_rows(out_ptr, o_tok * stride_o_t + heads.to(gl.int64) * stride_o_h, acc0, acc1, acc2, acc3,
                        inv, rows_ok, False)
            gl.store(lse_ptr + o_tok * stride_lse_t + heads.to(gl.int64) * stride_lse_h, lse, mask=rows_ok)
        else:
            slot = (2 * w + (b != first_seq).to(gl.int32)).to(gl.int64)
            inv = gl.where(has, 1.0 / gl.where(has, l_i, 1.0), 0.0)
            _store_rows(part_out_ptr, slot * stride_po_s + rows.to(gl.int64) * stride_po_r, acc0, acc1, acc2,
                        acc3, inv, rows_ok, True)
            gl.store(part_lse_ptr + slot * stride_pl_s + rows, lse, mask=rows_ok, eviction_policy="evict_last")


# sizes that change per step or per layer are not specialized (no recompile when one becomes 1 or changes its
# divisibility by 16), the cache's and outputs' strides are (the 16-byte copies need their divisibility); the
# page size is a compile-time constant (fixed per cache)
@gluon.jit(do_not_specialize=["batch", "num_heads", "num_workers", "layer_idx", "mask_code", "window", "pool_pages"])
def _mla_decode_ring_kernel(
    q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, schedule_ptr,
    sink_ptr, blocks_ptr, rope_ptr, scales_ptr,
    batch, num_heads, num_workers, layer_idx, mask_code, window, qk_scale, pool_pages,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r,
    stride_pl_s, stride_lt_b, stride_b_b, stride_b_l, stride_b_s, stride_r_b, stride_r_l, stride_r_s,
    stride_s_b, stride_s_l, stride_s_s,
    PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, HAS_SINK: gl.constexpr, NUM_SLOTS: gl.constexpr,
):
    """Program w: worker w's span of the schedule (`pagedmla.kernels.mla_decode` documents its rows), sequence by
    sequence. The cache is as `_mla_sparse_decode_ring_kernel` takes it; `pool_pages` is its page count (table
    entries outside `[0, pool_pages)` read no row)."""
    w = gl.program_id(0)
    # launched as a programmatic dependent: its launch overlaps the previous kernel's end; nothing is read before
    # that kernel is done. (It does not let the combine launch early: a grid of fewer programs than SMs would
    # then have the combine's programs crowd onto the idle SMs, waiting, and run there only.)
    wait_for_prior_grid(w)
    lat_s, rope_s, sc_s, lat_bf, q_s, qr_s, idx_s = _ring_buffers(q_ptr, blocks_ptr, NUM_SLOTS)
    sched = schedule_ptr + (1 + w) * 4
    first_seq = gl.load(sched)
    first_key = gl.load(sched + 1)
    last_seq = gl.load(sched + 2)
    stop_key = gl.load(sched + 3)
    layer = layer_idx.to(gl.int64)
    layer_off = layer * stride_b_l
    r_layer_off = layer * stride_r_l
    s_layer_off = layer * stride_s_l

    b = first_seq
    while b <= gl.minimum(last_seq, batch - 1):
        _decode_sequence(b, w, first_seq, first_key, last_seq, stop_key, q_ptr, out_ptr, lse_ptr, part_out_ptr,
                         part_lse_ptr, offsets_ptr, cache_lengths_ptr, lookup_ptr, sink_ptr, blocks_ptr, rope_ptr,
                         scales_ptr, lat_s, rope_s, sc_s, lat_bf, q_s, qr_s, idx_s, num_heads, mask_code, window,
                         qk_scale, pool_pages, layer_off, r_layer_off, s_layer_off, stride_q_t, stride_q_h,
                         stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_r, stride_pl_s,
                         stride_lt_b, stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s,
                         PAGE_SIZE, ROPE_OFF, HAS_SINK, NUM_SLOTS)
        b += 1
