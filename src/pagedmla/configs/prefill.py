"""Launch configs of the prefill kernels (data, not code) and the heuristics that pick them."""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class PrefillConfig:
    """Ragged MLA prefill attention: query rows x key rows per step of one program (one head).

    `heads_inner`: program ids walk every head of one query tile before the next tile (a 1-D grid), so the
    heaviest causal tiles of all heads run first; else tile slots vary fastest (a 2-D grid, slot x head).

    `warp_specialized`: the Gluon kernel of `pagedmla.kernels.prefill_ws` (Hopper, Triton 3.6; 128-row tiles,
    `block_n` keys per block, `num_stages`-deep key and value rings: 128 keys with 2 stages, or 64 keys with 2
    or 3, what shared memory holds; `num_warps` and `heads_inner` unused) for the calls it takes (bf16,
    DeepSeek's head sizes, the null and causal masks, an unscaled cache); other calls and configs run the Triton
    kernel with the heuristic's tiles."""

    block_m: int = 128
    block_n: int = 128
    num_warps: int = 8
    num_stages: int = 2
    heads_inner: bool = False
    warp_specialized: bool = False


@dataclass(frozen=True)
class DecompressConfig:
    """Latent-cache decompression: a gather kernel fills k_latent_buffer (`gather_rows` rows per program), then
    torch.matmul (cuBLAS) writes k_buffer. A Triton GEMM gathering its A operand from the cache measured 0.61-0.68
    of cuBLAS on the H200 (16384 x 512 x 32768), the gather + cuBLAS pair 0.98, so the pair is the design."""

    gather_rows: int = 16
    gather_warps: int = 4


@functools.lru_cache(maxsize=4096)
def prefill_heuristic(*, fp8_cache: bool = False, interpret: bool = False,
                      rows_per_sequence: float = 4096.0, num_heads: int = 128, hopper: bool = False) -> PrefillConfig:
    """Measured on the H200 (benchmarks/prefill_probe.py, causal, against cuDNN in the same run): 128 x 128
    tiles, 8 warps, double-buffered for long prompts (0.64-0.66 of cuDNN at 4096-8192 tokens per sequence,
    128 x 64 tiles 0.58-0.63); 128 x 64 tiles at 3 stages when sequences average 2048 new rows or fewer
    (0.56 of cuDNN at 16 x 1024 against 0.49: more, smaller diagonal tiles balance better; ptxas serializes
    their warpgroup MMAs at 3 stages, yet 2 stages, which it does not, measured slower: 0.551 against 0.574).
    FP8 caches take 128 x 64, whose rope scales would not fit in shared memory beside 128-key tiles; 16 x 16
    under the interpreter so tiny tests cross tile edges.

    16 heads or fewer walk the heads of a tile first (`heads_inner`: 0.68 of cuDNN against 0.62 at 2 x 4096,
    16 heads, the heaviest tiles of every head start first). At 128 heads that order ran 10-15% slower
    (0.54 against 0.63 at 1 x 8192): the programs running together then belong to ~130 different heads and
    share no keys in L2, where tile-major order runs the tiles of one or two heads together.

    On Hopper (`hopper`), bf16 caches take the warp-specialized kernel, 128-key blocks in 2-deep rings. Its
    prototype against cuDNN in the same run (`benchmarks/experiments/gluon_prefill.py` at 1a1f51d, equal-length
    causal sequences, `benchmarks/results/session-8/gluon-prefill-1a1f51d.txt`): 0.90 / 0.85 / 0.84 / 0.82 at
    1 x 8192, 4 x 4096, 16 x 1024 (128 heads) and 2 x 4096 (16 heads); 64-key blocks in 3-deep rings 0.78 / 0.74
    / 0.76 / 0.70. The package's kernel in the harness: 0.88-0.89 / 0.84-0.89 / 0.73-0.75 / 0.82-0.85
    (`bench-prefill-d77c5dd-{1,2}.txt`)."""
    if interpret:
        return PrefillConfig(block_m=16, block_n=16, num_warps=1, num_stages=1)
    if hopper and not fp8_cache:
        return PrefillConfig(block_m=128, block_n=128, num_warps=4, num_stages=2, warp_specialized=True)
    heads_inner = num_heads <= 16
    if fp8_cache or rows_per_sequence <= 2048:
        return PrefillConfig(block_m=128, block_n=64, num_warps=8, num_stages=3, heads_inner=heads_inner)
    return PrefillConfig(heads_inner=heads_inner)


@functools.lru_cache(maxsize=4096)
def decompress_heuristic(*, interpret: bool = False) -> DecompressConfig:
    return DecompressConfig(gather_rows=8, gather_warps=1) if interpret else DecompressConfig()
