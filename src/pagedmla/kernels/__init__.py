"""@triton.jit kernels only: no allocation, no validation (host launchers live in pagedmla.ops)."""
