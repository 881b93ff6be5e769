"""Launch configs of the cache-write kernels (data, not code) and the heuristics that pick them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatmulToCacheConfig:
    """Tile of the projection GEMM whose epilogue stores into the cache (`k/kv_matmul_ragged_paged`).

    With `tail` set, the columns past the last full block_n tile (64 of DeepSeek's 576) run as a second launch
    with the tail's (smaller) tile instead of a half-empty block_n tile. `tma` loads the operands with tensor
    descriptors (TMA) where their layout allows it (16-byte aligned base and row stride), else with pointers.
    """

    block_m: int = 128
    block_n: int = 64
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 4
    tma: bool = False
    tail: MatmulToCacheConfig | None = None


@dataclass(frozen=True)
class RowConfig:
    """Row-wise cache kernels: tokens per program of the RMS norm, warps of the RMS norm and rope kernels."""

    block_rows: int = 4
    num_warps: int = 4


def matmul_to_cache_heuristic(num_rows: int, out_features: int, in_features: int, *,
                              interpret: bool = False) -> MatmulToCacheConfig:
    """A tile for `[num_rows, in_features] @ [in_features, out_features]`.

    Measured on the H200 (benchmarks/prefill_probe.py, 7168 -> 576): at 4096 rows TMA-fed 128 x 128 tiles with
    8 warps (76 us) beat 128 x 64 tiles (88 us); at 256 rows 128 x 64 pointer tiles (39 us) beat 64-row TMA
    tiles (65 us). Up to 64 rows take 64-row tiles (the smallest warpgroup MMA; not timed). The interpreter
    takes 16-row tiles so that tiny test shapes still cross tile edges.
    """
    if interpret:
        return MatmulToCacheConfig(block_m=16, block_n=32, block_k=32, group_m=2, num_warps=1, num_stages=1)
    if num_rows <= 64:
        return MatmulToCacheConfig(block_m=64, block_n=64, block_k=128, group_m=1, num_warps=4, num_stages=4)
    if num_rows >= 1024:
        return MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3,
                                   tma=True)
    return MatmulToCacheConfig()


def row_heuristic(*, interpret: bool = False) -> RowConfig:
    return RowConfig(block_rows=2, num_warps=1) if interpret else RowConfig()
