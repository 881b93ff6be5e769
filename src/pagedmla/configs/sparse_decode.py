"""Launch config of the sparse (top-k) MLA decode kernels and the heuristic that picks it."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SparseDecodeConfig:
    """Tiles of `_mla_sparse_decode_kernel` and `_mla_sparse_decode_combine_kernel`.

    Attributes:
        block_m: rows (heads, or heads x query tokens with fold_shared_index) per program; every gathered key
            row serves them all.
        block_n: indices gathered per iteration of the main loop.
        num_splits: programs that share one group's index list (1: no partials, no combine kernel).
        num_warps, num_stages: of the main kernel (num_stages pipelines the gathers).
        prefetch_indices: load each block's indices an iteration ahead (see `_attend_stream`).
        ring_slots: run the Gluon kernel `pagedmla.kernels.mla_sparse_decode_ring` with a ring of this many 32-key
            slots instead of the Triton kernel (0); only for calls it can take (`ops._triton_sparse_decode.
            sparse_ring_ready`: Hopper, a bf16/fp16 cache or the rope-aware FP8 one, at most 16 rows per group);
            2 to 8. block_m, block_n, num_warps and num_stages then describe that kernel's fixed tiling (16, 32,
            4, 1).
        ws: run the warp-specialized Gluon kernel `pagedmla.kernels.mla_sparse_decode_ws` (64 heads of one query
            token per program, 32-key blocks; only for calls it can take: `ops._triton_sparse_decode.
            sparse_ws_ready`, the rope-aware FP8 row with a bf16 q and a multiple of 64 heads). block_m, block_n
            and num_warps then describe its fixed tiling (64, 32, 8).
        combine_block_r, combine_block_dv, combine_num_warps: rows and output columns per program, and warps, of
            the combine kernel (4 whole 512-column rows: 113.7 us against 118.2 us for 8 rows x 128 columns at
            16 heads, bf16, B = 64, 2 query tokens, 2 splits, H200; the columns are capped at kv_lora_rank, and
            many splits fall back to 8 x 128: see `combine_tile`).
    """

    block_m: int = 64
    block_n: int = 64
    num_splits: int = 1
    num_warps: int = 8
    num_stages: int = 2
    prefetch_indices: bool = False
    ring_slots: int = 0
    ws: bool = False
    combine_block_r: int = 4
    combine_block_dv: int = 512
    combine_num_warps: int = 4


COMBINE_TILE_ELEMENTS = 8192


def combine_tile(cfg: SparseDecodeConfig, splits: int, kv_lora_rank: int) -> tuple[int, int]:
    """(rows, columns) per combine program for `splits` partials: the config's tile while all splits' partials
    of it (`[next_pow2(splits), rows, columns]` float32, held in registers) stay within 8K elements, else 8 x 128
    (4 x 512 at 16 splits takes 156 registers, at 32 it spills; 8 x 128 does not up to 64 splits)."""
    rows, cols = cfg.combine_block_r, min(cfg.combine_block_dv, kv_lora_rank)
    if _pow2_at_least(splits) * rows * cols > COMBINE_TILE_ELEMENTS:
        rows, cols = 8, min(128, kv_lora_rank)
    return rows, cols


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def block_m_for(rows_per_group: int) -> int:
    """All of a group's rows when they fit in 64 (16 at least: the MMA's smallest M)."""
    return min(64, max(16, _pow2_at_least(max(1, rows_per_group))))


def splits_for(*, programs: int, index_blocks: int, block_m: int, num_sms: int) -> int:
    """Split a group's indices when the grid would leave SMs idle: a 64-row program fills an SM alone, smaller
    ones run two to an SM (measured on H200: 16 heads x 128 tokens did best with 2 splits, 16 heads x 2 tokens
    x 64 folded sequences with 4). Each split keeps >= 4 index blocks so the partials (written and re-read by
    the combine) stay small next to the gathered rows."""
    target = num_sms if block_m >= 64 else 2 * num_sms
    return max(1, min(target // max(1, programs), index_blocks // 4, 64))


# ring slots of the Gluon 16-row kernel. benchmarks/sparse_probe.py, H200, 16 heads, B64, 2 query tokens, topk
# 2048, bf16 (benchmarks/results/session-11/sparse-ring-92f1113.txt): 2 slots at two programs per SM (92 KB each)
# 84.0 us; one program per SM with 3 / 4 / 5 slots 89.0 / 90.1 / 91.5 us; the Triton kernel 114.2 us
RING_SLOTS = 2
# fold_shared_index calls the ring kernel could take unfolded (one index row per token) run it unfolded up to this
# many query tokens per sequence: each token gathers the rows again, but the folded 32-row Triton tile is slower
# (benchmarks/sparse_probe.py, H200, 16 heads, B64, topk 2048, bf16, benchmarks/results/session-12/)
RING_UNFOLD_MAX_Q = 2


def ring_config(*, num_groups: int, topk: int, num_sms: int, slots: int = RING_SLOTS) -> SparseDecodeConfig:
    """The Gluon ring kernel's config: two programs per SM at 2 slots (92 KB of shared memory each), one from 3
    slots on (129 KB and more), and a group's index blocks split when the groups alone would leave program
    slots idle (each split keeps >= 4 blocks)."""
    per_sm = 2 if slots <= 2 else 1
    splits = max(1, min(per_sm * num_sms // max(1, num_groups), -(-topk // 32) // 4, 64))
    return SparseDecodeConfig(block_m=16, block_n=32, num_splits=splits, num_warps=4, num_stages=1,
                              ring_slots=slots)


def ws_config(*, num_tokens: int, num_heads: int, topk: int, num_sms: int) -> SparseDecodeConfig:
    """The warp-specialized kernel's config: one program per (token, 64 heads) and SM (199 KB of shared
    memory), index rows split when the programs alone would leave SMs idle (each split keeps >= 4 of the
    32-key blocks)."""
    splits = splits_for(programs=num_tokens * max(1, num_heads // 64), index_blocks=-(-topk // 32), block_m=64,
                        num_sms=num_sms)
    return SparseDecodeConfig(block_m=64, block_n=32, num_splits=splits, num_warps=8, num_stages=1, ws=True)


@functools.lru_cache(maxsize=4096)
def heuristic(*, rows_per_group: int, num_groups: int, topk: int, q_dtype: torch.dtype, cache_dtype: torch.dtype,
              compute_dtype: torch.dtype, num_sms: int, interpret: bool = False,
              rope_aware: bool = False, ring: bool = False) -> SparseDecodeConfig:
    """Tiles for one call: the best configs of benchmarks/sparse_probe.py on H200 (register and shared-memory
    budgets checked with ptxas for sm_90a).

    64-row tiles use Hopper's warpgroup MMA: the `[64, kv_lora_rank]` float32 accumulator takes two warpgroups
    (8 warps) at kv_lora_rank 512; 64 indices per block, two stages for the rope-aware FP8 row, else three.
    16-row tiles: 4 warps, 32 indices, three stages; 32-row tiles: 8 warps, 64 indices, two stages. float32
    compute quadruples q's and the blocks' shared memory: at most 32 rows and 16 indices per block.

    `ring` (the launcher's `sparse_ring_ready`): groups of at most 16 rows run the Gluon ring kernel
    (`ring_config`).
    """
    block_m = block_m_for(rows_per_group)
    if ring and not interpret and block_m <= 16:
        return ring_config(num_groups=num_groups, topk=topk, num_sms=num_sms)
    if interpret:
        return SparseDecodeConfig(block_m=block_m, block_n=16, num_splits=1, num_warps=1, num_stages=1,
                                  prefetch_indices=block_m < 64, combine_block_r=4, combine_block_dv=32,
                                  combine_num_warps=1)
    if compute_dtype == torch.float32:
        block_m, block_n, warps, stages = min(block_m, 32), 16, 8 if block_m >= 32 else 4, 2
    elif block_m >= 64:
        # the rope-aware FP8 row: 2 stages (no spill). sparse_probe, 128 heads, B64 q2 topk 2048, H200: bf16 q
        # 373.3 / 370.9 us against 382.5 / 380.3 with 3 (two runs), FP8 q 474.8 against 494.1. An FP8 cache with
        # 64-column scale groups keeps 3 (449.5 against 459.3 us with 2); bf16 caches 3 (not re-measured)
        block_n, warps = 64, 8
        stages = 2 if rope_aware else 3
    elif block_m >= 32:
        block_n, warps, stages = 64, 8, 2
    else:
        block_n, warps, stages = 32, 4, 3
    programs = num_groups * -(-rows_per_group // block_m)
    splits = splits_for(programs=programs, index_blocks=-(-topk // block_n), block_m=block_m, num_sms=num_sms)
    return SparseDecodeConfig(block_m=block_m, block_n=block_n, num_splits=splits, num_warps=warps,
                              num_stages=stages, prefetch_indices=block_m < 64)


def search_space(*, rows_per_group: int) -> list[SparseDecodeConfig]:
    """Configs worth timing for a shape (opt-in tuning; tests never use it)."""
    block_m = block_m_for(rows_per_group)
    warps = (8,) if block_m >= 64 else (4, 8)
    return [SparseDecodeConfig(block_m=block_m, block_n=n, num_splits=s, num_warps=w, num_stages=st)
            for n in (16, 32, 64) for s in (1, 2, 4) for w in warps for st in (1, 2, 3)]
