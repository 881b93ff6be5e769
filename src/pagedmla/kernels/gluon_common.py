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
