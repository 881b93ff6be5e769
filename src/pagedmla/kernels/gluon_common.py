"""Helpers shared by the Gluon (Hopper) kernels: `prefill_ws`, `mla_decode_ws` and the ring kernels."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

LOG2E = gl.constexpr(1.4426950408889634)
LN2 = gl.constexpr(0.6931471805599453)


@gluon.constexpr_function
def mma_layout(n):
    """Accumulator layout of a 64-row warpgroup MMA over n columns (one consumer warpgroup's 4 warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def launch_dependents():
    """Let the next kernel of the stream, when it was launched as a programmatic dependent (the split-KV
    combine), start its programs now: they wait in `griddepcontrol.wait` for this grid's writes, and the
    launch latency between the two kernels is hidden. A no-op for any other launch."""
    gl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [], dtype=gl.int32, is_pure=False,
                              pack=1)
