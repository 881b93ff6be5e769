"""Host helpers shared by the Triton decode launchers for FP8 caches and q: the MMA operands' dtype and the
scale mode of a tile (the modes are documented in `pagedmla.kernels.mla_sparse_decode`)."""

from __future__ import annotations

import torch
import triton.language as tl

_FP8 = torch.float8_e4m3fn
_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def compute_dtype(q_dtype: torch.dtype, cache_dtype: torch.dtype, rope_aware: bool) -> torch.dtype:
    """The dtype of the MMA operands: q's (bf16 for FP8 q) when the cache converts to it exactly (FP8 values,
    or the same dtype), float32 when either side is float32 or the two 16-bit formats differ."""
    if torch.float32 in (q_dtype, cache_dtype):
        return torch.float32
    qd = torch.bfloat16 if q_dtype == _FP8 else q_dtype
    if rope_aware and qd != torch.bfloat16:
        # the rope-aware row stores its rope part as bf16
        return torch.float32
    if cache_dtype in (_FP8, qd):
        return qd
    if q_dtype == _FP8:
        # e4m3 values are exact in fp16 too
        return cache_dtype
    return torch.float32


def _tile_mode(c0: int, width: int, group: int) -> tuple[int, int, int]:
    """(mode, NG, GS) of the columns `[c0, c0 + width)` under one scale per `group` columns (module docstring of
    `pagedmla.kernels.mla_sparse_decode`)."""
    if c0 // group == (c0 + width - 1) // group:
        return 1, 1, width
    if _is_pow2(group) and group < width and c0 % group == 0:
        return 2, width // group, group
    return 3, 1, width
