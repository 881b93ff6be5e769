"""Helpers shared by the Gluon (Hopper) kernels: `prefill_ws`, `mla_decode_ws`, `mla_decode_ring` and
`mla_sparse_decode_ws`."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)
# the 64-row decode kernels (`mla_decode_ws`, `mla_sparse_decode_ws`): DeepSeek's latent and rope columns, the
# output (and latent) columns each of the two consumer warpgroups owns, and the rows of a tile (64 heads)
D_LAT = gl.constexpr(512)
D_ROPE = gl.constexpr(64)
COLS = gl.constexpr(256)
BLOCK_M = gl.constexpr(64)


@gluon.constexpr_function
def mma_layout(n):
    """Accumulator layout of a 64-row warpgroup MMA over n columns (one consumer warpgroup's 4 warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def opaque_zero(i):
    """0 for 0 <= i < 2^30, from an instruction with side effects, so that nothing computed from it moves above
    the call: an index `k + opaque_zero(i)` keeps the compiler from computing MMA descriptors of constant shared
    tiles ahead of a loop and holding (or spilling) them."""
    return gl.inline_asm_elementwise("shr.s32 $0, $1, 30;", "=r,r", [i], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def wait_for_prior_grid(i):
    """When this kernel was launched as a programmatic dependent (`launch_pdl`), wait until the kernel before it
    has finished and its writes are visible: call it before the first global memory access (a no-op otherwise).
    `i`: any int32 scalar (the instruction needs an operand to hang on)."""
    gl.inline_asm_elementwise("griddepcontrol.wait; mov.b32 $0, $1;", "=r,r", [i], dtype=gl.int32, is_pure=False,
                              pack=1)


@gluon.jit
def visible_range(q_pos, num_keys, mask_code, window):
    """Visible keys `[lo, hi)` of queries at absolute positions `q_pos` (a scalar or a vector) among `num_keys`
    keys, per `pagedmla.masks` (`pagedmla.kernels.common.visible_range` in Triton); both grow with q_pos."""
    causal = (mask_code == 1) | (mask_code == 2) | (mask_code == 5)
    sliding = (mask_code == 2) | (mask_code == 3)
    chunked = (mask_code == 4) | (mask_code == 5)
    w = gl.maximum(window, 1)
    lo = gl.where(sliding, q_pos - w + 1, 0)
    lo = gl.where(chunked, (q_pos // w) * w, lo)
    hi = gl.where(chunked, gl.minimum(num_keys, (q_pos // w + 1) * w), num_keys)
    hi = gl.where(causal, gl.minimum(hi, q_pos + 1), hi)
    return gl.maximum(lo, 0), hi


@gluon.jit
def _piece_slot(p, first, first_slot):
    """The partial slot of piece p of a split sequence (`_mla_decode_combine_kernel`'s numbering: piece 0 is the
    first worker's `first_slot`, piece p > 0 worker first + p's slot 2 (first + p), b being its first sequence)."""
    return gl.where(p == 0, first_slot, 2 * (first + p)).to(gl.int64)


@gluon.jit
def merge_if_last(w, b, num_workers, row_start, num_q, num_heads, schedule_ptr, sink_ptr, out_ptr, lse_ptr,
                  part_out_ptr, part_lse_ptr, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s,
                  stride_po_r, stride_pl_s, ROWS: gl.constexpr, WARPS: gl.constexpr, HAS_SINK: gl.constexpr):
    """After worker w wrote its partial of split sequence b (every warp of the calling partition, WARPS of them):
    count the arrival in the sequence's schedule row (its 4th int, 0 from the plan) and, in the last worker to
    arrive, merge the pieces' partials by LSE into `out` / `lse` as `_mla_decode_combine_kernel` does (rows of the
    sequence's first ROWS; columns D_LAT), then set the count back to 0 for the next call with the plan.

    This replaces the combine kernel's launch (about 3.3 us a call at 16 heads B64 N4096, BENCHMARKS.md,
    twenty-fourth session) by a merge at the end of the last piece. Ordering: the partition's barrier puts every
    warp's partial stores before one thread's acq_rel atomic (release); the last arriver's atomic (acquire)
    orders its loads of the others' partials after their stores, which bypass L1 (`.cg`)."""
    seq = schedule_ptr + (1 + num_workers + b) * 4
    first = gl.load(seq)
    last = gl.load(seq + 1)
    first_slot = gl.load(seq + 2)
    # a whole sequence has first == last; a worker outside [first, last] has no slot the merge reads (the plan
    # gives it no keys of b)
    if (first < last) & (w >= first) & (w <= last):
        gl.thread_barrier()
        ticket = gl.atomic_add(seq + 3, 1, sem="acq_rel", scope="gpu")
        if ticket == last - first:
            gl.store(seq + 3, 0)
            # all the columns at once, pieces two at a time: one round trip of loads per pair
            layout: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [WARPS, 1], [1, 0])
            row_l: gl.constexpr = gl.SliceLayout(1, layout)
            rows = gl.arange(0, ROWS, row_l)
            cols = gl.arange(0, D_LAT, gl.SliceLayout(0, layout))
            rows_ok = rows < num_q * num_heads
            r64 = rows.to(gl.int64)[:, None] * stride_po_r + cols[None, :]
            m_i = gl.full([ROWS], float("-inf"), gl.float32, row_l)
            l_i = gl.zeros([ROWS], gl.float32, row_l)
            acc = gl.zeros([ROWS, D_LAT], gl.float32, layout)
            for p in range(0, last - first + 1, 2):
                s0 = _piece_slot(p, first, first_slot)
                s1 = _piece_slot(p + 1, first, first_slot)
                ok1 = rows_ok & (p + 1 <= last - first)
                lse0 = gl.load(part_lse_ptr + s0 * stride_pl_s + rows, mask=rows_ok, other=float("-inf"),
                               cache_modifier=".cg")
                lse1 = gl.load(part_lse_ptr + s1 * stride_pl_s + rows, mask=ok1, other=float("-inf"),
                               cache_modifier=".cg")
                o0 = gl.load(part_out_ptr + s0 * stride_po_s + r64, mask=rows_ok[:, None], other=0.0,
                             cache_modifier=".cg")
                o1 = gl.load(part_out_ptr + s1 * stride_po_s + r64, mask=ok1[:, None], other=0.0,
                             cache_modifier=".cg")
                m_new = gl.maximum(m_i, gl.maximum(lse0, lse1))
                m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
                alpha = gl.exp(m_i - m_safe)
                w0 = gl.exp(lse0 - m_safe)
                w1 = gl.exp(lse1 - m_safe)
                l_i = l_i * alpha + w0 + w1
                acc = acc * alpha[:, None] + w0[:, None] * o0 + w1[:, None] * o1
                m_i = m_new
            has = l_i > 0.0
            lse = gl.where(has, m_i + gl.log(gl.where(has, l_i, 1.0)), float("-inf"))
            inv = gl.where(has, 1.0 / gl.where(has, l_i, 1.0), 0.0)
            tok = rows // num_heads
            head = rows % num_heads
            if HAS_SINK:
                # e^lse / (e^lse + e^sink): a +inf sink gives 0
                sink = gl.load(sink_ptr + head, mask=rows_ok, other=float("-inf"))
                inv = gl.where(has, inv / (1.0 + gl.exp(sink - gl.where(has, lse, 0.0))), 0.0)
            o_row = (row_start + tok).to(gl.int64) * stride_o_t + head.to(gl.int64) * stride_o_h
            gl.store(out_ptr + o_row[:, None] + cols[None, :], (acc * inv[:, None]).to(out_ptr.dtype.element_ty),
                     mask=rows_ok[:, None])
            gl.store(lse_ptr + (row_start + tok).to(gl.int64) * stride_lse_t + head.to(gl.int64) * stride_lse_h,
                     lse, mask=rows_ok)
