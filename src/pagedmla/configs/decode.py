"""Launch configs of the MLA decode kernels and the heuristics that pick them.

Three pieces: `DecodePlanConfig` is fixed when the plan is built (once per step: how many split-KV workers share
the batch's key blocks), `DecodeConfig` when a layer runs (tiles of the attention kernel), `CombineConfig` with
it (tiles of the kernel that merges split sequences).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DecodeConfig:
    """Tiles of `_mla_decode_kernel`.

    Attributes:
        block_m: rows (heads x query tokens of one sequence) per program; every cache row read serves them all.
        block_n: keys per iteration of the main loop.
        num_warps: warps per program.
        num_stages: software pipelining of the cache loads. Without prefetch_table the key rows' addresses wait
            on a table load of the same iteration, and a block's loads overlap the previous block's math only
            from 5 stages on; with it `num_stages - 1` blocks are in flight.
        prefetch_table: load each block's lookup-table entry one block ahead (see `_page_block`).
        unmasked_interior: the key blocks every row of a tile sees in full run a loop of their own with no
            bounds on the loads and no interval compares on the logits (the masked blocks before and after it
            keep them); off: one masked loop over every block. On the H200 (bf16, 64-row tiles, 128 heads) it
            took 1219 -> 1112 us at B128 N8192 and 323 -> 296 us at B64 N4096 (see `heuristic` for 16 rows).
        maxnreg: cap on registers per thread (None: the compiler's choice), so that more programs share an SM.
        warp_specialized: run the Gluon kernel `pagedmla.kernels.mla_decode_ws` (two consumer warpgroups,
            one of which issues the TMA copies) where it applies (`ops._triton_decode.decode_ws_ready`: Hopper,
            bf16, 512 + 64 dims, heads a multiple or a divisor of 64, page sizes multiples of 64); other calls run
            `_mla_decode_kernel` with this config.
        ring_slots: run the Gluon kernel `pagedmla.kernels.mla_decode_ring` with a ring of this many 32-key
            slots (0: not); only for calls it can take (`ops._triton_decode.decode_ring_ready`: Hopper, a
            bf16/fp16 cache or the rope-aware FP8 one, at most 16 rows per sequence); 2 to 8. block_m, block_n,
            num_warps and num_stages then describe that kernel's fixed tiling (16, 32, 4, 1).
        ws16: run the Gluon kernel `pagedmla.kernels.mla_decode_ws16` (transposed logits, a widening
            partition) for a call it can take (`ops._triton_decode.decode_ws16_ready`: Hopper, bf16 q, the
            rope-aware FP8 cache, at most 16 rows per sequence, pages multiples of 64 slots); a ValueError for
            any other call. Its fixed tiling: 16 rows, 64-key blocks, 4 + 4 + 1 warps.
    """

    block_m: int = 64
    block_n: int = 32
    num_warps: int = 8
    num_stages: int = 5
    prefetch_table: bool = False
    unmasked_interior: bool = False
    maxnreg: int | None = None
    warp_specialized: bool = False
    ring_slots: int = 0
    ws16: bool = False


# Programmatic dependent launches of the decode kernels (dense and sparse) and their combines on Hopper (see
# docs/layout.md): each kernel's launch overlaps the previous kernel's end and waits for it before reading
# anything. H200, A/B in one process (BENCHMARKS.md): dense (fifteenth session) B1 N4096 16 heads 14.3 -> 12.8
# us, B1 N16384 17.0 -> 15.5, B64 N4096 84.7 -> 84.0, 128 heads within noise; sparse (sixteenth) B1 16 heads
# 16.2 -> 14.9 us, B64 84.2 -> 83.3. False: plain launches.
PROGRAMMATIC_LAUNCH = True

# the Gluon kernel's fixed tiling (64 rows, 64-key blocks, two 4-warp consumers; block_n, num_warps and
# num_stages are what the Triton kernel runs with when the Gluon one cannot take a call)
WARP_SPECIALIZED = DecodeConfig(block_m=64, block_n=64, num_warps=8, num_stages=2, unmasked_interior=True,
                                warp_specialized=True)


@dataclass(frozen=True)
class CombineConfig:
    """Tiles of `_mla_decode_combine_kernel`: pieces, rows and output columns merged per step (pieces are
    loaded BLOCK_P at a time, so that several loads are in flight), and warps. `pdl`: on Hopper (with
    `PROGRAMMATIC_LAUNCH`), launch it as a programmatic dependent of the decode kernel: it is scheduled as the
    decode programs exit and waits for the decode kernel's writes to be visible before reading anything (and
    lets the next kernel, when launched the same way, be scheduled early). `block_t`: a second tile of pieces
    merged in the same step, after the first `block_p` (0: none)."""

    block_p: int = 8
    block_r: int = 4
    block_dv: int = 128
    num_warps: int = 4
    pdl: bool = True
    block_t: int = 0


@dataclass(frozen=True)
class DecodePlanConfig:
    """Split-KV schedule of one step.

    Attributes:
        num_workers: programs along the key axis (per row tile) that share the batch's key blocks.
        granularity: keys per schedule block (worker spans start and end on multiples of it).
        fixed_cost: cost, in blocks, charged per sequence (loading q, writing its result), so that many short
            sequences are not all given to one worker.
        tail_cost: the part of fixed_cost charged after the sequence's key blocks (writing its result), the
            rest before them. Every piece of a split sequence loads q and writes a result: charging the whole
            cost up front gave the first of two equal pieces 31 blocks and the second 33 (16 heads, B = 64,
            N = 4096, 128 workers), and the kernel waits for the longest.
    """

    num_workers: int
    granularity: int = 64
    fixed_cost: int = 2
    tail_cost: int = 1

    def __post_init__(self):
        if not 0 <= self.tail_cost <= self.fixed_cost:
            raise ValueError(f"Invalid tail_cost: expected 0 <= tail_cost <= fixed_cost ({self.fixed_cost}), "
                             f"got {self.tail_cost}")


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def block_m_for(num_heads: int, max_q: int) -> int:
    """Rows per program: all of a sequence's rows when they fit in 64 (16 at least: the MMA's smallest M)."""
    return min(64, max(16, _pow2_at_least(max(1, num_heads * max(1, max_q)))))


# FP8 16-row tiles run two programs per SM (`programs_per_sm`) from this many keys in a batch on (batch x keys)
TWO_PER_SM_MIN_KEYS = 1 << 19


# slots of the Gluon 16-row ring kernel (`DecodeConfig.ring_slots`): two programs of 2 slots (94 KB of shared
# memory each) share an SM, as the sparse ring kernel measured best (`configs.sparse_decode.RING_SLOTS`)
RING_SLOTS = 2
RING = DecodeConfig(block_m=16, block_n=32, num_warps=4, num_stages=1, ring_slots=RING_SLOTS)
WS16 = DecodeConfig(block_m=16, block_n=64, num_warps=4, num_stages=1, ws16=True)
# batch keys (batch x longest sequence) from which a plan schedules the ring kernel, two workers per SM. H200,
# 16 heads, one query token (benchmarks/decode_probe.py, benchmarks/results/session-12/): with 32-key units
# (ring-b64-f862af4...txt) B64 N4096 bf16 88.3 us against 88.4 for the Triton tile at its 128 workers, the
# rope-aware FP8 row 114.2 against 132.3; with 64-key units (ring-probe-3680814...txt) B128 N4096 156.6 against
# 160.0. Smaller batches keep the Triton tile (ring-small-4c24fe4...txt): B32 N4096 53.1 us against 57.3 on the
# ring, B16 N4096 36.3 against 36.9.
# 64-key blocks per piece (estimated: batch x blocks of the longest sequence over max(workers, batch)) from which
# a call runs the register-operand 16-row FP8 kernel (`kernels.mla_decode_ws16_rs`) rather than the widen one.
# H200, 16 heads, one token, 132 workers (benchmarks/experiments/ws16_kernels.py at be0ae8f,
# benchmarks/results/session-23/ws16-kernels-be0ae8f.txt; BENCHMARKS.md, twenty-third session), widen ->
# registers: B64 N4096 (31 blocks) 79.1 -> 66.3 us, B256 N1024 (16) 82.4 -> 73.6, B32 N4096 (15.5) 44.0 ->
# 42.5, B8 N16384 (15.5) 44.5 -> 40.6; below: B64 N1024 (7.8) 29.0 -> 33.6, B16 N4096 (7.8) 30.1 -> 34.3 (and at
# 2c32830, one change earlier, B1 N16384 13.6 -> 19.8). 24 until the twenty-third session's two changes.
WS16_RS_MIN_BLOCKS = 12
RING_MIN_KEYS = 1 << 18
# keys per schedule unit of a ring plan: a 64-key unit cut B64 N4096's sequences (64 units plus 2 of fixed
# cost) into pieces of 15, 17, 16 and 16 blocks at 256 workers; 32-key units into 31, 33, 32 and 32 of 32 keys,
# and without the fixed cost (`ops._triton_decode.plan_config`: two workers or more per sequence) into 32 each:
# 86.5 -> 85.2 us (bench decode, benchmarks/results/session-12/bench-decode-h16-806f290...)
RING_GRANULARITY = 32


def ring_worth_it(*, batch: int, max_keys: int) -> bool:
    """Whether a plan whose calls the ring kernel can take should schedule it (see RING_MIN_KEYS)."""
    return batch * max(1, max_keys) >= RING_MIN_KEYS


def programs_per_sm(*, num_heads: int, max_q: int, batch: int, max_keys: int, rope_aware_fp8: bool,
                    ring: bool = False) -> int:
    """Programs per SM the plan schedules workers for: 2 for the ring kernel (`ring`: the plan expects calls the
    Gluon ring kernel takes, see `RING`), 2 for the rope-aware FP8 cache at 16-row tiles with at least
    TWO_PER_SM_MIN_KEYS keys in the batch, else 1.

    Two 4-warp programs per SM (`heuristic`'s two-per-SM FP8 tile) hide each other's latency chains. On the
    H200 (benchmarks/decode_probe.py, 16 heads, one query token, benchmarks/results/session-6/
    fp8-two-per-sm-22ab22c.txt) against one 8-warp program per SM at the default workers: B128 N4096 252.0 ->
    238.9 us, B128 N8192 494.1 -> 460.3, B32 N32768 501.8 -> 471.1; B64 N4096 135.8 -> 135.6 (even), and
    smaller batches slower (B16 N4096 45.9 -> 52.8, B1 N16384 20.0 -> 21.7), hence the threshold."""
    if block_m_for(num_heads, max_q) > 16:
        return 1
    if ring:
        return 2
    if not rope_aware_fp8:
        return 1
    return 2 if batch * max_keys >= TWO_PER_SM_MIN_KEYS else 1


@functools.lru_cache(maxsize=4096)
def heuristic(*, num_heads: int, max_q: int, kv_lora_rank: int, rope_dim: int, q_dtype: torch.dtype,
              cache_dtype: torch.dtype, batch: int = 64, interpret: bool = False,
              compute_dtype: torch.dtype | None = None, tile_scales: bool = False,
              programs_per_sm: int = 1, warp_specialized: bool = False, ring: bool = False,
              ws16: bool = False) -> DecodeConfig:
    """Tiles for one decode call (measured on an H200, see benchmarks/decode_probe.py).

    Every tile takes 8 warps: a 64-row tile needs two warpgroups for its `[64, kv_lora_rank]` float32
    accumulator at kv_lora_rank 512. bf16/fp16: 16- and 32-row tiles stream 64-key blocks two at a time (5 stages, one
    program per SM). A 64-row tile cannot hold three 64-key buffers next to its q tile, and its key loads are
    not overlapped at 2 stages; at batch 64 and more, 64-key blocks still beat 32-key blocks with overlap,
    because the warpgroup MMAs of the logits get twice as wide; small batches (few, long pieces per program)
    gain more from the overlap. Loading the table entries a block ahead (prefetch_table) measured no faster for
    bf16 (3-4% slower at 16 heads), so these configs leave it off. bf16 tiles run the key blocks every row sees
    in full in an unmasked loop of their own (`unmasked_interior`). At 64 rows: 6-14% faster at 128 heads,
    B = 1 to 128. At 16 and 32 rows: at 16 heads `bench decode` went 164.6 -> 159.1 us (B128 N4096), 317.6 ->
    303.7 (B128 N8192), 325.7 -> 314.0 (B32 N32768) and MTP q2 B64 142.1 -> 124.6. Small batches lost 2-4 us
    (B1 N16384 18.0 -> 20.2, B16 N4096 37.2 -> 41.6) until the empty masked loops were skipped whole; since
    then (decode_probe, one run): B1 18.7 -> 18.6, B16 37.5 -> 36.6, B64 N4096 90.7 -> 88.6, B128 N4096 165.9
    -> 160.5. FP8 tiles keep one masked loop: with the interior loop they measured within 1% either way at
    the default worker counts (decode_probe, 128 and 16 heads, B64 N4096). float32 operands (any float32
    input, or q and cache of different types) take the FMA path, whose operands live in registers: 16-row
    tiles.

    `warp_specialized` (the launcher's `decode_ws_ready`: Hopper, bf16, 512 + 64 dims, heads a multiple or a
    divisor of 64, page sizes multiples of 64): the Gluon kernel `pagedmla.kernels.mla_decode_ws`, for 64-row
    tiles (heads a multiple of 64) and for calls of more than 16 rows per sequence whose heads divide 64 (its
    tiles then hold several tokens' heads: 16 heads with 2 to 8 query tokens, MTP at TP8; 32 heads), for 16
    and 32 heads. H200 (`decode_probe.py`, BENCHMARKS.md, sixteenth session) against the Triton tiles: 16 heads
    q2 B64 N4096 120.0 -> 98.5 us, q4 154.6 -> 103.7, q2 B128 219.9 -> 171.4, B16 50.3 -> 48.9, B1 16.3 ->
    12.8; 32 heads q1 B64 119.3 -> 98.1, B1 N16384 20.0 -> 18.6 (16 heads q3 and q5 to q8, 32 heads q2 and
    more, and fewer heads were not timed). One token at 16 heads (16 rows) stays on the ring kernel (96.1 us
    here against 86-88 for the ring); a call whose `max_seq_length` says 2 tokens runs this kernel even when
    every sequence has one. On the H200 (benchmarks/results/session-9/
    decode-ws-4f150b8.txt, `decode_probe.py`, 128 heads) against this heuristic's Triton tiles: B64 N4096 252.5 ->
    167.0 us, B128 N4096 495.8 -> 322.4, B128 N8192 954.0 -> 612.5, B1 N16384 41.2 -> 32.3, MTP 2 / 4 tokens at
    B64 N4096 477.2 -> 314.3 and 964.7 -> 615.2.

    `ws16` (the launcher's `decode_ws16_ready`: Hopper, a bf16 q with the rope-aware FP8 cache, at most 16 rows
    per sequence, pages a multiple of 64 slots, TMA-readable q and cache): the Gluon kernel
    `pagedmla.kernels.mla_decode_ws16` (`WS16`), whose plan schedules one worker per SM (`ops._triton_decode.
    ws16_planned`). On the H200 (benchmarks/experiments/ws16_variants.py, BENCHMARKS.md, nineteenth session)
    against the ring kernel at its two workers per SM: 16 heads, one token, B64 N4096 109.9 -> 81.1 us, B128
    N4096 207.8 -> 147.0 us; B1 N16384 17.2 -> 13.5 us against the Triton tile. Other shapes were not timed.

    `ring` (the launcher's `decode_ring_ready`: Hopper, a bf16/fp16 cache or the rope-aware FP8 one with a bf16 q,
    512 + 64 dims, at most 16 rows per sequence): the Gluon ring kernel `pagedmla.kernels.mla_decode_ring`
    (`RING`), whose plan schedules two workers per SM (`programs_per_sm`).

    FP8 cache or q (`compute_dtype` given: the MMA operands' dtype): the e4m3 tile is copied to shared memory
    as it is (the copies pipeline), converted in registers (`pagedmla.kernels.fp8._e4m3_to_bf16`) and stored
    back as bf16 for the MMAs, with the table entries loaded a block ahead. Measured on the H200 with the
    rope-aware row (one scale per row): 16-row tiles take 64-key blocks at 3 stages, 64-row tiles 64-key
    blocks at 2 stages. `tile_scales` (scales applied inside the latent tile: a granularity finer than the
    latent) needs room for the scale tiles: 2 stages at 16 rows, 32-key blocks at 2 stages at 64 rows. 32-row
    tiles, and 16-row tiles with an FP8 q, take 2 stages (3 do not fit, or barely, with an FP8 q). When the
    plan schedules two programs per SM (`programs_per_sm`; the launcher passes 2 for the rope-aware cache when
    the schedule has more workers than SMs), 16-row tiles with one scale per row take 4 warps, 32-key blocks
    and 4 stages (114 KB of shared memory and 255 registers each, so two fit an SM): with a bf16 q at 256-258
    workers they beat the 8-warp tile at every measured shape (B1 N16384 25.2 -> 21.5 us, B16 N4096 58.0 ->
    52.8, B64 N4096 149.3 -> 135.6, B128 N4096 264.2 -> 238.9). An FP8 q keeps its 8-warp tile (a 4-warp one
    fits twice only at 2 stages; neither was timed with twice the workers).

    Every config here fits the H200's 227 KiB of shared memory per block for DeepSeek's 576/512 dims, with
    bf16 or FP8 q and every scale mode (checked with `scripts/compile_sm90.py`, which reports a kernel's shared
    memory and spills without a GPU).
    """
    block_m = block_m_for(num_heads, max_q)
    if interpret:
        # the unmasked interior loop on, so that tiny tests run all three key ranges
        return DecodeConfig(block_m=block_m, block_n=16, num_warps=1, num_stages=1, unmasked_interior=True)
    # tiles of several tokens' heads: timed at 16 and 32 heads only (fewer heads keep the Triton tiles)
    if warp_specialized and (block_m == 64 and num_heads % 64 == 0
                             or block_m >= 32 and num_heads in (16, 32)):
        return WARP_SPECIALIZED
    if ws16 and block_m <= 16:
        return WS16
    if ring and block_m <= 16:
        return RING
    if compute_dtype is not None:
        if compute_dtype == torch.float32:
            return DecodeConfig(block_m=16, block_n=32, num_warps=8, num_stages=2)
        if block_m >= 64:
            return DecodeConfig(block_m=block_m, block_n=32 if tile_scales else 64, num_warps=8, num_stages=2,
                                prefetch_table=True)
        if programs_per_sm >= 2 and block_m <= 16 and not tile_scales and q_dtype != torch.float8_e4m3fn:
            return DecodeConfig(block_m=block_m, block_n=32, num_warps=4, num_stages=4, prefetch_table=True)
        # an FP8 q's tiles take shared memory too: 3 stages would leave 512 bytes of the 227 KiB
        stages = 3 if block_m <= 16 and not tile_scales and q_dtype != torch.float8_e4m3fn else 2
        return DecodeConfig(block_m=block_m, block_n=64, num_warps=8, num_stages=stages, prefetch_table=True)
    if torch.float32 in (q_dtype, cache_dtype) or q_dtype != cache_dtype:
        return DecodeConfig(block_m=16, block_n=32, num_warps=8, num_stages=2)
    if block_m >= 64:
        if batch <= 16:
            return DecodeConfig(block_m=64, block_n=32, num_warps=8, num_stages=5, unmasked_interior=True)
        return DecodeConfig(block_m=64, block_n=64, num_warps=8, num_stages=2, unmasked_interior=True)
    return DecodeConfig(block_m=block_m, block_n=64, num_warps=8, num_stages=5, unmasked_interior=True)


@functools.lru_cache(maxsize=4096)
def combine_heuristic(*, num_workers: int, batch: int, kv_lora_rank: int, rows: int = 16,
                      interpret: bool = False) -> CombineConfig:
    """Combine tiles from the pieces a split sequence can have (about `W / B + 1` for equal lengths) and the
    rows (query tokens x heads) of a sequence.

    Few pieces (8 or fewer): 2 pieces per step over 4 whole rows. On the H200 (BENCHMARKS.md, "combine") the
    older rule's 4 to 16 pieces per step of 128 columns took 13 us at 16 heads B = 64 and 25 us at 128 heads
    B = 16; this tile takes 2.9 and 5.5 us. Many pieces (B = 1 over all SMs): all of a sequence's pieces in one
    step, up to 256, so that their loads are in flight at once (a step is one load round trip: at 4 to 8 pieces
    per step, B = 1 took 29 to 54 us against 3.5 us), over one row and 32 columns, with the warps that keep about
    2048 warps in the grid (16 per SM) and at most 128 values per thread. On the H200 at B = 1
    (benchmarks/results/session-13/combine-b1-05fe818.txt, torch.profiler): 128 heads N16384 (67 pieces) 5.3 us
    with one warp against 6.4 for the older 64 columns and 4 warps, N4096 (34 pieces) 4.8 against 5.3; 16 heads
    N16384 (130 pieces) 2.8 us with 256 pieces per step and 4 warps against 3.5 for 128 per step. The estimate is
    the batch's average: in a skewed batch one long sequence can have many more pieces and is merged 2 per step
    (not timed; the older rule merged 4 per step but took 13 us for a single step of 2 pieces)."""
    if interpret:
        return CombineConfig(block_p=2, block_r=4, block_dv=min(32, kv_lora_rank), num_warps=1)
    pieces = -(-num_workers // max(1, batch)) + 1
    if pieces <= 8:
        return CombineConfig(block_p=2, block_r=4, block_dv=min(512, kv_lora_rank), num_warps=4)
    block_p = min(256, _pow2_at_least(pieces))
    block_t = 0
    below = block_p // 2
    if pieces <= 128 and pieces - below <= below // 8:
        # just past a power of two (67 pieces at batch 1 on 66 workers): that many lanes plus a small second
        # tile, instead of twice the lanes. 128 heads B1 N16384 22.4-23.0 us a call against 23.0-23.5 with 128
        # lanes, N4096 (34 pieces, 32 + 2) 14.9 against 15.3 (BENCHMARKS.md, twenty-seventh session)
        block_p, block_t = below, _pow2_at_least(pieces - below)
    block_dv = min(kv_lora_rank, 32)
    programs = max(1, batch * rows * (kv_lora_rank // block_dv))
    warps = max(1, min(4, _pow2_at_least(-(-2048 // programs))))
    warps = max(warps, (block_p + block_t) * block_dv // (32 * 128))
    return CombineConfig(block_p=block_p, block_r=1, block_dv=block_dv, num_warps=warps, block_t=block_t)


MAX_GRID_Y = 65535  # CUDA's limit on a grid's y dimension


def fit_combine_grid(cfg: CombineConfig, *, max_rows: int, kv_lora_rank: int) -> CombineConfig:
    """`cfg` with its columns clipped to the latent width, and with enough rows per program that the row
    blocks fit the grid's y dimension (calls of more than 65535 rows per sequence, e.g. hundreds of query tokens
    at 128 heads on an explicit split); pieces per step shrink by as much, so a thread holds no more values."""
    block_dv = min(cfg.block_dv, kv_lora_rank)
    block_r, block_p, block_t = cfg.block_r, cfg.block_p, cfg.block_t
    if -(-max_rows // block_r) > MAX_GRID_Y:
        block_r = _pow2_at_least(-(-max_rows // MAX_GRID_Y))
        block_p = max(1, cfg.block_p * cfg.block_r // block_r)
        block_t = cfg.block_t * cfg.block_r // block_r
    return dataclasses.replace(cfg, block_p=block_p, block_r=block_r, block_dv=block_dv, block_t=block_t)


@functools.lru_cache(maxsize=4096)
def plan_heuristic(*, batch: int, num_heads: int, max_q: int, max_keys: int, num_sms: int,
                   interpret: bool = False, programs_per_sm: int = 1) -> DecodePlanConfig:
    """Workers for one step: `programs_per_sm` programs per SM in all (row tiles times workers; see
    `programs_per_sm`), but never so many that a
    worker gets fewer than ~2 blocks of the longest possible batch (the combine would cost more than the
    split gains). When it costs at most a tenth of the programs, the count is rounded so that equal
    sequences fall into whole pieces (k workers per sequence, or k sequences per worker): splitting a
    sequence across workers costs a partial result and a combine, which measured up to 25% at 128 heads."""
    if interpret:
        return DecodePlanConfig(num_workers=2, granularity=16, fixed_cost=2, tail_cost=1)
    granularity = 64
    block_m = block_m_for(num_heads, max_q)
    tiles = -(-num_heads * max(1, max_q) // block_m)
    workers = max(1, programs_per_sm * num_sms // tiles)
    if batch >= 1:
        per_worker = -(-batch // workers)
        whole = batch * (workers // batch) if batch < workers else -(-batch // per_worker)
        if 10 * whole >= 9 * workers:
            workers = whole
    blocks = batch * (-(-max(1, max_keys) // granularity) + 2)
    workers = max(1, min(workers, blocks // 2))
    return DecodePlanConfig(num_workers=workers, granularity=granularity, fixed_cost=2, tail_cost=1)


def search_space(*, num_heads: int, max_q: int) -> list[DecodeConfig]:
    """bf16/fp16 configs worth timing for a shape (opt-in tuning; tests never use it)."""
    block_m = block_m_for(num_heads, max_q)
    if block_m >= 64:
        shapes = [(64, 8, 2), (32, 8, 5)]
    else:
        shapes = [(64, 8, 5), (64, 8, 2), (32, 4, 5)]
    return [DecodeConfig(block_m=block_m, block_n=n, num_warps=w, num_stages=s) for n, w, s in shapes]
