"""Helpers shared by the Gluon (warp-specialized Hopper) kernels: `prefill_ws` and `mla_decode_ws`."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)


@gluon.constexpr_function
def mma_layout(n):
    """Accumulator layout of a 64-row warpgroup MMA over n columns (one consumer warpgroup's 4 warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])
