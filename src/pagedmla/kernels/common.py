"""Jit helpers shared by the kernels: the interpreter-safe dot and the mask rule of `pagedmla.masks`.

Mask codes (see `pagedmla.masks`): null 0, causal 1, sliding_window_causal 2, sliding_window_noncausal 3,
chunked 4, chunked_causal 5. Every mask leaves each query row a contiguous interval of visible keys, so the
kernels work with that interval (two compares per element, and whole key blocks outside it are skipped).
"""

import triton
import triton.language as tl

try:  # grid dependency control for programmatic dependent launches (Triton 3.4+ with its NVIDIA backend)
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    GDC_AVAILABLE = True
except ImportError:
    GDC_AVAILABLE = False

    @triton.jit
    def gdc_wait():
        """Stand-in: never called (launchers set the kernels' PDL flag only when GDC_AVAILABLE)."""

    @triton.jit
    def gdc_launch_dependents():
        """Stand-in: never called (see `gdc_wait`)."""


@triton.jit
def load_or_zero(ptrs, mask):
    """tl.load with zeros where `mask` is False; `mask=None` (statically all true) loads unmasked."""
    if mask is None:
        return tl.load(ptrs)
    else:
        return tl.load(ptrs, mask=mask, other=0.0)


@triton.jit
def dot(a, b, acc, INTERPRET: tl.constexpr, IEEE: tl.constexpr):
    """`acc + a @ b` with a float32 accumulator.

    The CPU interpreter returns garbage for bf16 operands, so it upcasts them; float32 operands (IEEE) ask
    for full float32 products instead of TF32 on the GPU.
    """
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    elif IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def split_logits(q_a, k_a, q_b, k_b, opaque, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 INTERPRET: tl.constexpr, IEEE: tl.constexpr):
    """`q_a @ k_a^T + q_b @ k_b^T` (float32 `[BLOCK_M, BLOCK_N]`) as two MMAs, neither of which feeds the other.

    With warpgroup MMAs, Triton gives a dot whose result flows into another dot all its warps along M (the
    flash-attention layout); at 64 rows and 8 warps both warpgroups then compute the same logits. Here the
    second product is not accumulated onto the first, and their accumulators start at `0 * opaque` (`opaque`:
    a finite runtime float, e.g. an int argument converted; the compiler cannot prove it finite, so it cannot
    fold the product to 0), which keeps the compiler from fusing `x + dot(a, b, 0)` back into one chained dot.
    With `hide_from_dot_chain` on what reaches the next dot, the logits' MMA splits its N across the
    warpgroups instead."""
    zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32) * opaque
    return dot(q_a, tl.trans(k_a), zero, INTERPRET, IEEE) + dot(q_b, tl.trans(k_b), zero, INTERPRET, IEEE)


@triton.jit
def hide_from_dot_chain(p, alpha, opaque):
    """`(p, alpha)` unchanged, passed through a branch on a runtime float (`opaque == opaque`, false only for
    NaN; both branches give the same values: `x + 0.0` only turns -0 into +0). Triton's layout choice looks
    for a dot in the uses of a dot's result, and does not follow values out of a branch, so the logits'
    MMA is not laid out as the start of a chain (see `split_logits`)."""
    if opaque == opaque:  # noqa: PLR0124 (false only for NaN, which the compiler cannot rule out)
        p_out = p
        alpha_out = alpha
    else:
        p_out = p + 0.0
        alpha_out = alpha + 0.0
    return p_out, alpha_out


@triton.jit
def visible_range(q_pos, num_keys, mask_code, window):
    """Visible keys `[lo, hi)` of queries at absolute positions `q_pos` (any shape) among `num_keys` keys."""
    causal = (mask_code == 1) | (mask_code == 2) | (mask_code == 5)
    sliding = (mask_code == 2) | (mask_code == 3)
    chunked = (mask_code == 4) | (mask_code == 5)
    w = tl.maximum(window, 1)
    lo = tl.zeros_like(q_pos)
    lo = tl.where(sliding, q_pos - w + 1, lo)
    lo = tl.where(chunked, (q_pos // w) * w, lo)
    hi = tl.zeros_like(q_pos) + num_keys
    hi = tl.where(chunked, tl.minimum(hi, (q_pos // w + 1) * w), hi)
    hi = tl.where(causal, tl.minimum(hi, q_pos + 1), hi)
    return tl.maximum(lo, 0), hi


@triton.jit
def mask_visible(q_pos, k_pos, num_keys, mask_code, window):
    """Elementwise visibility of key positions to query positions (broadcasting), per `pagedmla.masks`."""
    lo, hi = visible_range(q_pos, num_keys, mask_code, window)
    return (k_pos >= lo) & (k_pos < hi)


@triton.jit
def ragged_search(offsets_ptr, x, batch, STEPS: tl.constexpr, DIV: tl.constexpr, ADD: tl.constexpr):
    """The b in [0, batch) with `v(b) <= x < v(b + 1)`, where `v(i) = offsets[i] // DIV + i * ADD` is
    non-decreasing; `batch` when `x >= v(batch)`. x may be a scalar or a tensor.

    DIV=1, ADD=0 finds the sequence of a ragged row. `STEPS >= batch.bit_length()` bisection steps: a constexpr,
    because with NumPy >= 2.4 the interpreter cannot take a runtime loop bound; converged steps load nothing.
    """
    lo = x * 0 + 1
    hi = x * 0 + batch + 1
    for _ in range(STEPS):
        active = lo < hi
        mid = (lo + hi) // 2
        v = tl.load(offsets_ptr + mid, mask=active, other=0)
        if DIV != 1:
            v = v // DIV
        v = v + mid * ADD
        lo = tl.where(active & (v <= x), mid + 1, lo)
        hi = tl.where(active & (v > x), mid, hi)
    return lo - 1


@triton.jit
def ragged_count(offsets_ptr, x, batch, CHUNKS: tl.constexpr, BLOCK: tl.constexpr, DIV: tl.constexpr,
                 ADD: tl.constexpr):
    """The same b as `ragged_search` for a scalar x, as the count of `i in [1, batch]` with `v(i) <= x`: one
    vector load per BLOCK sequences instead of a chain of dependent loads (`CHUNKS * BLOCK >= batch`)."""
    count = 0
    for c in range(CHUNKS):
        i = c * BLOCK + 1 + tl.arange(0, BLOCK)
        ok = i <= batch
        v = tl.load(offsets_ptr + i, mask=ok, other=0)
        if DIV != 1:
            v = v // DIV
        count += tl.sum((ok & (v + i * ADD <= x)).to(tl.int32), 0)
    return count
