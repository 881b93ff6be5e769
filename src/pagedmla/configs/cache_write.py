"""Launch configs of the cache-write kernels (data, not code) and the heuristics that pick them."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MatmulToCacheConfig:
    """Tile of the projection GEMM whose epilogue stores into the cache (`k/kv_matmul_ragged_paged`).

    `tma` loads the operands with tensor descriptors (TMA) where their layout allows it (16-byte aligned base
    and row stride), else with pointers.

    `split_k` cuts each tile's K range into that many pieces, one program each: a GEMM with fewer tiles than
    SMs (few rows) then still fills the GPU. Every piece stores its float32 partial product; the last piece of
    a tile to finish (a per-tile counter) sums them in piece order and scatters the sum into the cache, so the
    result does not depend on which piece finishes last.

    `tail_block_n` (0: off) gives the columns past the last full `block_n` tile (64 of DeepSeek's 576 at
    `block_n` 128) tiles of their own, this wide, in the same launch, split `tail_split_k` ways: the leftover
    columns then cost about one extra wave's `tail_block_n / block_n / tail_split_k`, instead of a whole
    second wave of `block_n` tiles.

    `tail_in_main` (with `tail_block_n`, unsplit main tiles, and leftover columns that one tail tile covers): no
    tail programs; each main tile's program then also runs one K piece of its row tile's tail tile (the tail
    tile splits into as many pieces as there are main column tiles; `tail_split_k` is then unused), so the
    leftover columns lengthen every program a little instead of taking a wave of their own. Other shapes
    ignore it.

    `stream_workers` (0: off) switches to stream-K in groups (`_matmul_to_cache_stream_kernel`): column tiles of
    `block_n + tail_block_n` columns (two MMAs sharing each block of x: 128 + 64 makes DeepSeek's 576 three
    tiles), one program per column tile in each group, `stream_workers // column tiles` groups, each taking an
    equal span of all row tiles' K blocks. A row tile shared by consecutive groups is summed by the last of
    them, as a split tile is. `split_k`, `tail_split_k` and `group_m` are then unused.
    """

    block_m: int = 128
    block_n: int = 64
    block_k: int = 64
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 4
    tma: bool = False
    split_k: int = 1
    tail_block_n: int = 0
    tail_split_k: int = 1
    stream_workers: int = 0
    tail_in_main: bool = False

    def __post_init__(self):
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"MatmulToCacheConfig.{name}: expected a power of two >= 16, got {value}")
        for name in ("group_m", "num_warps", "num_stages", "split_k", "tail_split_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"MatmulToCacheConfig.{name}: expected >= 1, got {getattr(self, name)}")
        if self.stream_workers < 0:
            raise ValueError(f"MatmulToCacheConfig.stream_workers: expected >= 0 (0: off), got {self.stream_workers}")
        t = self.tail_block_n
        if t and (t < 16 or t & (t - 1) or t >= self.block_n):
            raise ValueError(f"MatmulToCacheConfig.tail_block_n: expected 0 or a power of two in [16, block_n = "
                             f"{self.block_n}), got {t}")


@dataclass(frozen=True)
class RowConfig:
    """Row-wise cache kernels: tokens per program of the RMS norm, warps of the RMS norm and rope kernels."""

    block_rows: int = 4
    num_warps: int = 4


# The most pieces one tile's K range is cut into: more pieces add partial stores and a longer final sum.
MAX_SPLIT_K = 8
# Rows from which the projection GEMM runs stream-K (see matmul_to_cache_heuristic).
STREAM_MIN_ROWS = 16384
# Shared memory of the 5-stage 128 x 128 tiles with a 64-column tail piece (ptxas, sm_90a: 204 KB); GPUs that
# offer programs less keep tail programs.
TAIL_IN_MAIN_SHARED = 210_000


@functools.lru_cache(maxsize=4096)
def matmul_to_cache_heuristic(num_rows: int, out_features: int, in_features: int, *, num_sms: int = 132,
                              shared_memory: int = 232448, interpret: bool = False) -> MatmulToCacheConfig:
    """A tile for `[num_rows, in_features] @ [in_features, out_features]` on a GPU of `num_sms` SMs whose programs
    may use up to `shared_memory` bytes (the H200's 227 KB by default).

    Measured on the H200 (benchmarks/prefill_probe.py, 7168 -> 576): at 4096 rows TMA-fed 128 x 128 tiles with
    8 warps (76 us) beat 128 x 64 tiles (88 us); at 256 rows 128 x 64 pointer tiles (39 us) beat 64-row TMA
    tiles (65 us). Up to 64 rows take 64-row tiles (the smallest warpgroup MMA). `with_splits` then adds the
    K splits and the tail tiles. The interpreter takes 16-row tiles so that tiny test shapes still cross tile
    edges, and no splits (the tests name split configs themselves).

    Unsplit 128 x 128 tiles with one tail tile per row tile (DeepSeek's 576 = 4 x 128 + 64: from 2049 rows on 132
    SMs, timed from 3072) run the tail inside the main programs (`tail_in_main`) with 4 warps and 5 stages: H200,
    graph-timed, 7168 -> 576, two alternating runs each
    (`benchmarks/results/session-8/k_matmul-tail-in-main-b2d7339.txt`): 3072 rows 51.9 / 52.1 us against 59.1 / 59.1
    us (8 warps, 3 stages, tail programs split 2 ways); 4096 rows 59.0 / 59.2 against 66.6 / 65.2 us; 8192 rows
    127.9 / 123.5 against 141.1 / 134.3 us. (4 warps and 4 stages with tail programs instead: 73.2 us at 4096 rows,
    the tail programs a second wave; the same tiles into 512 columns, no tail: 47.3 us.) At 16384 and 32768 rows the
    stream-K below measured even or better (239.3 / 255.2 against 244.2 / 253.6 us; 484.0 / 473.9 against 488.0 /
    488.3 us).

    From STREAM_MIN_ROWS rows, an output width that 128 + 64 column tiles cover exactly (DeepSeek's 576) takes
    stream-K (`stream_workers`), as long as those tiles leave at least four groups of programs (wider outputs
    would run few groups, each through many row tiles): H200, graph-timed, 7168 -> 576, two alternating runs each
    (`benchmarks/results/session-7/k_matmul-stream-c369f9e.txt`): 16384 rows 240.8 / 240.8 us against 254.2 /
    256.4 us; 8192 rows 159.3 / 125.6 against 144.3 / 134.5 (and 128.0 against 133.5 in an earlier run: mixed);
    4096 rows 70.0 / 68.4 against 65.1 / 63.0 (slower).
    """
    if interpret:
        return MatmulToCacheConfig(block_m=16, block_n=32, block_k=32, group_m=2, num_warps=1, num_stages=1)
    stream_tiles = out_features // (128 + 64)
    if num_rows >= STREAM_MIN_ROWS and out_features % (128 + 64) == 0 and stream_tiles <= num_sms // 4:
        return MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=4,
                                   tma=True, tail_block_n=64, stream_workers=num_sms)
    if num_rows <= 64:
        base = MatmulToCacheConfig(block_m=64, block_n=64, block_k=128, group_m=1, num_warps=4, num_stages=4)
    elif num_rows >= 1024:
        base = MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3,
                                   tma=True)
    else:
        base = MatmulToCacheConfig()
    cfg = with_splits(base, num_rows, out_features, in_features, num_sms)
    if (num_rows >= 1024 and cfg.split_k == 1 and 0 < out_features % cfg.block_n <= cfg.tail_block_n
            and shared_memory >= TAIL_IN_MAIN_SHARED):
        # one tail tile per row tile, run inside the main programs (`tail_in_main`)
        return replace(cfg, num_warps=4, num_stages=5, tail_split_k=1, tail_in_main=True)
    return cfg


def with_splits(cfg: MatmulToCacheConfig, num_rows: int, out_features: int, in_features: int,
                num_sms: int) -> MatmulToCacheConfig:
    """`cfg` with tail tiles where the last column tile would be at most half full, and K splits that spread
    tiles fewer than the SMs over (about) all of them: the main tiles split when they fill less than half the
    SMs; the tail tiles split into about half as many pieces as SMs, and at least two (they run beside the
    main tiles, two programs per SM).

    Measured on the H200 (`benchmarks/prefill_probe.py --graph`, 7168 -> 576, device times):
    - 4096 rows: 75.8 us without tail tiles; 63.2 / 65.9 / 76.3 us with the tail split 2 / 4 / 8 ways (a second
      run: 77.9 us without, 62.8 / 65.4 us split 2 / 4);
    - 8192 rows: 140.0 us with the tail unsplit, 125.7 / 124.4 us split 2 / 4 ways;
    - 1024 rows: 36.4 us unsplit, 30.7 us with the main tiles split 4 and the tail 8 ways;
    - 256 rows: 31.4 us unsplit, 15.7 / 14.2 / 20.7 us split 4 / 7 / 8 ways (8 needs a second wave);
    - 64 rows: 19.8 us unsplit, 9.8 us split 8 ways.
    """
    tiles_m = -(-num_rows // cfg.block_m)
    k_blocks = -(-in_features // cfg.block_k)
    full_n, rest = divmod(out_features, cfg.block_n)
    tail = 0
    if 0 < rest <= cfg.block_n // 2 and full_n > 0:
        tail = max(16, 1 << (rest - 1).bit_length())
    main_tiles = tiles_m * (full_n if tail else -(-out_features // cfg.block_n))
    split = 1
    if 2 * main_tiles < num_sms:
        split = max(1, min(MAX_SPLIT_K, num_sms // main_tiles, k_blocks))
    tail_split = 1
    if tail:
        tail_tiles = tiles_m * -(-rest // tail)
        tail_split = max(1, min(MAX_SPLIT_K, max(2, num_sms // (2 * tail_tiles)), k_blocks))
    return replace(cfg, split_k=split, tail_block_n=tail, tail_split_k=tail_split)


@functools.lru_cache(maxsize=4096)
def row_heuristic(*, interpret: bool = False) -> RowConfig:
    return RowConfig(block_rows=2, num_warps=1) if interpret else RowConfig()
