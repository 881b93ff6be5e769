"""Host launchers of the Triton MLA decode (registered in `ops/decode.py`): the plan and the dense decode.

`plan` builds the split-KV schedule on the device (one small kernel, no host sync) and returns a `DecodePlan`
whose `num_partitions` is the number of workers and whose `schedule` is the int32 table documented in
`pagedmla.kernels.mla_decode`. `decode` runs the attention kernel over a grid of `num_partitions * num_tiles`
programs, where `num_tiles = cdiv(max_seq_length * num_heads, block_m)`: host ints only, so a captured CUDA
graph replays with new lengths, lookup tables and schedules as long as the batch size, `max_seq_length` (an
upper bound of every `n_b`) and the worker count stay the same. `refresh_plan` refills a plan's schedule in
place for the next step (what a graph replay needs). Inputs were validated by the public functions.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch
import triton

from ..configs import decode as decode_configs
from ..configs.decode import (
    RING_GRANULARITY,
    CombineConfig,
    DecodeConfig,
    DecodePlanConfig,
    block_m_for,
    combine_heuristic,
    fit_combine_grid,
    heuristic,
    plan_heuristic,
    programs_per_sm,
    ring_worth_it,
)
from ..kernels.common import GDC_AVAILABLE
from ..kernels.mla_decode import (
    _mla_decode_combine_kernel,
    _mla_decode_kernel,
    _mla_decode_plan_kernel,
)
from ._dispatch import (
    gluon_kernels_available,
    interpreter_enabled,
    is_hopper,
    ring_dtypes_ok,
    ring_layout_ok,
)
from ._fp8_tiles import _TL_DTYPES, _tile_mode, compute_dtype
from .decode import DecodePlan

_WS_AVAILABLE = gluon_kernels_available()
if _WS_AVAILABLE:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    from ..kernels.mla_decode_ring import _mla_decode_ring_kernel
    from ..kernels.mla_decode_ws import _mla_decode_ws_kernel
    from ..kernels.mla_decode_ws16 import _mla_decode_ws16_kernel
    from ..kernels.mla_decode_ws16_rs import _mla_decode_ws16_rs_kernel

# logits are scaled by scale * log2(e) so the kernels use exp2
_LOG2E = 1.0 / math.log(2.0)
_PLAN_BLOCK_B = 64
_PLAN_BLOCK_W = 64


@functools.lru_cache(maxsize=64)
def _num_sms(device: torch.device) -> int:
    """SMs of `device` (4 off CUDA, for the interpreter); cached: the launcher asks on every decode call."""
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def programmatic_launch(device: torch.device, interpret: bool) -> bool:
    """Whether the decode kernels (dense and sparse) and their combines are launched as programmatic dependents:
    on Hopper with a Triton that has grid dependency control, unless `configs.decode.PROGRAMMATIC_LAUNCH` is
    off."""
    return decode_configs.PROGRAMMATIC_LAUNCH and GDC_AVAILABLE and not interpret and is_hopper(device)


def pdl_kwargs(pdl: bool) -> dict:
    """Launch keywords for a programmatic dependent launch (none otherwise: Triton before 3.4 has no such
    keyword)."""
    return {"launch_pdl": True} if pdl else {}


def plan_config(*, batch: int, num_heads: int, max_q: int, max_keys: int, device: torch.device,
                num_partitions: int | None = None, rope_aware_fp8: bool = False,
                ring: bool = False, ws16: bool = False) -> DecodePlanConfig:
    """The schedule parameters `plan` uses (num_partitions, when given, fixes the worker count; `ring`: the
    calls will run the Gluon ring kernel, see `ring_planned`; `ws16`: the 16-row warp-specialized kernel, one
    program per SM, see `ws16_planned`)."""
    per_sm = 1 if ws16 else programs_per_sm(num_heads=num_heads, max_q=max_q, batch=batch, max_keys=max_keys,
                                            rope_aware_fp8=rope_aware_fp8, ring=ring)
    cfg = plan_heuristic(batch=batch, num_heads=num_heads, max_q=max_q, max_keys=max_keys,
                         num_sms=_num_sms(device), interpret=interpreter_enabled(), programs_per_sm=per_sm)
    if num_partitions is not None:
        cfg = dataclasses.replace(cfg, num_workers=num_partitions)
    if ring and cfg.num_workers > _num_sms(device):
        # the launcher takes the ring kernel on this schedule: units of its 32-key blocks; with two workers or
        # more per sequence, no fixed cost per sequence (every piece starts and ends anyway, and a cost charged
        # to a sequence's first and last pieces gave its middle pieces more keys: B64 N4096 at 256 workers cut
        # each sequence into 31, 33, 32 and 32 blocks)
        cfg = dataclasses.replace(cfg, granularity=RING_GRANULARITY)
        if cfg.num_workers >= 2 * batch:
            cfg = dataclasses.replace(cfg, fixed_cost=0, tail_cost=0)
    return cfg


def launch_programs_per_sm(*, rope_aware: bool, num_workers: int, tiles: int, device: torch.device,
                           interpret: bool) -> int:
    """Programs per SM the decode tiles are picked for: 2 when a rope-aware FP8 decode has more programs than
    SMs (a plan of `programs_per_sm` 2, or many partitions asked for), else 1 (the only layout timed with
    two per SM is the rope-aware one; the interpreter has no SMs)."""
    if interpret or not rope_aware:
        return 1
    return 2 if num_workers * tiles > _num_sms(device) else 1


def fill_schedule(schedule: torch.Tensor, input_row_offsets: torch.Tensor, cache_lengths: torch.Tensor,
                  cfg: DecodePlanConfig) -> None:
    """Write the schedule of `cfg.num_workers` workers for this step into `schedule` (int32 `[1 + W + B, 4]`)."""
    batch = cache_lengths.shape[0]
    grid = (triton.cdiv(cfg.num_workers, _PLAN_BLOCK_W),)
    _mla_decode_plan_kernel[grid](
        input_row_offsets, cache_lengths, schedule, batch, cfg.num_workers, cfg.granularity, cfg.fixed_cost,
        cfg.tail_cost, BLOCK_B=_PLAN_BLOCK_B, BLOCK_W=_PLAN_BLOCK_W, num_warps=4)


def plan(input_row_offsets, kv_collection, num_heads: int, num_partitions: int | None, max_q: int,
         max_keys: int) -> DecodePlan:
    """`mla_decode_plan` for the Triton backend: schedule `num_partitions` workers (None: the heuristic's)."""
    batch = kv_collection.batch_size
    device = kv_collection.device
    ws16 = ws16_planned(kv_collection.params, num_heads=num_heads, max_q=max_q, device=device)
    cfg = plan_config(batch=batch, num_heads=num_heads, max_q=max_q, max_keys=max_keys, device=device,
                      num_partitions=num_partitions,
                      rope_aware_fp8=kv_collection.params.per_token_scale_rope_aware,
                      ring=not ws16 and ring_planned(kv_collection.params, num_heads=num_heads, max_q=max_q,
                                                     device=device, batch=batch, max_keys=max_keys),
                      ws16=ws16)
    schedule = torch.empty((1 + cfg.num_workers + batch, 4), dtype=torch.int32, device=device)
    fill_schedule(schedule, input_row_offsets, kv_collection.cache_lengths, cfg)
    args = torch.tensor([batch, max_q, cfg.num_workers, max_keys], dtype=torch.int32, device=device)
    return DecodePlan(args, batch, max_q, cfg.num_workers, schedule, "triton", cfg.granularity, num_heads,
                      pieces_are_long(batch, max_keys, cfg.num_workers))


def refresh_plan(plan_: DecodePlan, input_row_offsets: torch.Tensor, kv_collection) -> None:
    """Refill `plan_` in place for a new step of the same batch size (e.g. before replaying a CUDA graph that
    captured a decode with it). Every `n_b` must stay within `plan_.max_seq_length`."""
    if plan_.backend != "triton":
        raise ValueError(f"Invalid plan: expected a plan built for backend 'triton', got {plan_.backend!r}")
    if kv_collection.batch_size != plan_.batch_size:
        raise ValueError(f"Invalid kv_collection: expected batch size {plan_.batch_size} (the plan's), "
                         f"got {kv_collection.batch_size}")
    # a plan for the ring kernel is the one cut in its units
    cfg = plan_config(batch=plan_.batch_size, num_heads=1, max_q=plan_.max_seq_length, max_keys=1,
                      device=kv_collection.device, num_partitions=plan_.num_partitions,
                      ring=plan_.granularity == RING_GRANULARITY)
    fill_schedule(plan_.schedule, input_row_offsets, kv_collection.cache_lengths, cfg)


def _check_dims(q, blocks, out, qk_rope_head_dim: int, rope_aware: bool = False) -> tuple[int, int]:
    kv_lora_rank = out.shape[-1]
    if rope_aware:
        rope = qk_rope_head_dim
        row = kv_lora_rank + 2 * rope
        want_q = row if q.dtype == torch.float8_e4m3fn else kv_lora_rank + rope
        if blocks.dtype != torch.float8_e4m3fn or blocks.shape[-1] != row or q.shape[-1] != want_q:
            raise ValueError(f"Invalid rope-aware shapes: expected float8_e4m3fn rows of {row} bytes and q's last "
                             f"dimension {want_q}, got {blocks.dtype} rows of {blocks.shape[-1]} and "
                             f"{q.shape[-1]}")
    else:
        rope = blocks.shape[-1] - kv_lora_rank
    for name, value in (("kv_lora_rank", kv_lora_rank), ("qk_rope_head_dim", rope)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"Invalid {name} for the Triton decode: expected a power of two >= 16, got {value} "
                             f"(use backend='reference')")
    if not rope_aware and (rope != qk_rope_head_dim or q.shape[-1] != blocks.shape[-1]):
        raise ValueError(f"Invalid shape of q: expected last dimension {blocks.shape[-1]} "
                         f"(kv_lora_rank {kv_lora_rank} + qk_rope_head_dim {qk_rope_head_dim}), got {q.shape[-1]}")
    return kv_lora_rank, rope


def _scale_modes(blocks, scales, granularity: int, kv_lora_rank: int, rope: int,
                 rope_aware: bool) -> tuple[int, tuple[int, ...]]:
    """(G, (latent mode, NG, GS, rope mode, NG, GS)) of an FP8 cache (see `_tile_mode`); mode 0 without
    scales. The rope-aware row: the latent's one scale (column 0) per row, the bf16 rope unscaled."""
    if scales is None:
        return blocks.shape[-1], (0, 1, kv_lora_rank, 0, 1, rope)
    if blocks.stride(-1) != 1 or scales.stride(-1) != 1:
        raise ValueError(f"Invalid layout of the FP8 cache: expected a contiguous last dimension of blocks and "
                         f"scales, got strides {tuple(blocks.stride())} and {tuple(scales.stride())}")
    if rope_aware:
        return blocks.shape[-1], (1, 1, kv_lora_rank, 0, 1, rope)
    group = granularity or blocks.shape[-1] // scales.shape[-1]
    return group, _tile_mode(0, kv_lora_rank, group) + _tile_mode(kv_lora_rank, rope, group)


def _ws_cache_rows(blocks: torch.Tensor, layer_idx: int,
                   dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, int, int] | None:
    """The cache `[num_blocks, 1, num_layers, page_size, 1, width]` of `dtype` as TMA rows: (a 2-D view
    `[rows, width]`, rows per page, the layer's first row), or None when TMA cannot read it (16-byte alignment,
    page and layer strides that are whole rows)."""
    sb, sl, ss = blocks.stride(0), blocks.stride(2), blocks.stride(3)
    if (blocks.dtype != dtype or blocks.stride(5) != 1 or ss < blocks.shape[5] or sb % ss or sl % ss
            or (ss * blocks.element_size()) % 16 or blocks.data_ptr() % 16):
        return None
    num_blocks, _, num_layers, page_size = blocks.shape[:4]
    rows = (num_blocks - 1) * (sb // ss) + (num_layers - 1) * (sl // ss) + page_size
    if rows >= 2 ** 31:
        return None
    return blocks.as_strided((rows, blocks.shape[5]), (ss, 1)), sb // ss, layer_idx * (sl // ss)


def _ws_q_rows(q: torch.Tensor) -> torch.Tensor | None:
    """q `[T, H, 576]` as TMA rows `[T * H, 576]` (row = token * H + head), or None when its strides do not
    allow it."""
    rows, heads, width = q.shape
    if (q.dtype != torch.bfloat16 or q.stride(2) != 1 or q.stride(1) < width or q.stride(0) != heads * q.stride(1)
            or (q.stride(1) * 2) % 16 or q.data_ptr() % 16 or rows * heads >= 2 ** 31):
        return None
    return q.as_strided((rows * heads, width), (q.stride(1), 1))


def _ws_out_rows(out: torch.Tensor) -> torch.Tensor | None:
    """out `[T, H, 512]` as TMA rows `[T * H, 512]` (row = token * H + head), or None when its strides do not
    allow it."""
    rows, heads, width = out.shape
    if (out.dtype != torch.bfloat16 or out.stride(2) != 1 or out.stride(1) < width
            or out.stride(0) != heads * out.stride(1) or (out.stride(1) * 2) % 16 or out.data_ptr() % 16
            or rows * heads >= 2 ** 31):
        return None
    return out.as_strided((rows * heads, width), (out.stride(1), 1))


def ring_planned(params, *, num_heads: int, max_q: int, device: torch.device, batch: int, max_keys: int) -> bool:
    """Whether a plan should schedule the Gluon ring kernel, two workers per SM: its calls can likely take it
    (`decode_ring_ready` without the tensors: q is assumed to be of the cache's dtype, bf16 for the rope-aware
    row) and the batch is big enough for it to win (`configs.decode.ring_worth_it`). A call that turns out not
    to fit runs the Triton kernel on the same schedule."""
    q_dtype = torch.bfloat16 if params.per_token_scale_rope_aware else params.dtype
    return (_WS_AVAILABLE and not interpreter_enabled() and is_hopper(device) and num_heads * max(1, max_q) <= 16
            and ring_dtypes_ok(q_dtype, params.dtype, params.head_size, params.per_token_scale_rope_aware)
            and ring_worth_it(batch=batch, max_keys=max_keys))


# A switch for the 16-row warp-specialized kernel (`kernels.mla_decode_ws16`): off, no call and no plan takes
# it (calls then run the ring or the Triton kernel). It was off for a while in the twentieth session: without a
# proxy fence it gave wrong results now and then (BENCHMARKS.md).
WS16_ENABLED = True


def ws16_planned(params, *, num_heads: int, max_q: int, device: torch.device) -> bool:
    """Whether a plan should schedule the 16-row warp-specialized kernel (`decode_ws16_ready` without the
    tensors: q is assumed bf16), one worker per SM: the rope-aware FP8 cache with pages of a multiple of 64
    slots, at most 16 rows per sequence, on Hopper. A call that turns out not to fit runs another kernel on the
    same schedule."""
    return (WS16_ENABLED and _WS_AVAILABLE and not interpreter_enabled() and is_hopper(device)
            and params.per_token_scale_rope_aware and num_heads * max(1, max_q) <= 16 and params.page_size % 64 == 0
            and ring_dtypes_ok(torch.bfloat16, params.dtype, params.head_size, True))


def decode_ring_ready(q, blocks, out, scales, q_scale, rope_aware: bool, max_q: int) -> bool:
    """Whether the Gluon ring kernel (`kernels.mla_decode_ring`) can take this call: Triton 3.6 on a Hopper GPU;
    q and cache both bf16 or both fp16 without scales, or a bf16 q with the rope-aware FP8 cache (its scales
    contiguous); DeepSeek's 512 + 64 dims; at most 16 rows (query tokens x heads) per sequence; the ring's
    layout (`ops._dispatch.ring_layout_ok`)."""
    scales_ok = scales is not None and scales.stride(-1) == 1 if rope_aware else scales is None
    return (_WS_AVAILABLE and is_hopper(q.device) and q_scale is None and scales_ok
            and ring_dtypes_ok(q.dtype, blocks.dtype, blocks.shape[-1], rope_aware)
            and q.shape[1] * max(1, max_q) <= 16 and q.shape[-1] == 576 and out.shape[-1] == 512
            and ring_layout_ok(q, blocks, out))


def _launch_ring(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx: int, scale: float,
                 mask_code: int, window: int, out, lse, schedule, sink, part_out, part_lse, slots: int,
                 has_sink: bool, rope_aware: bool, pdl: bool) -> None:
    """`_mla_decode_ring_kernel`, one program per worker, writing `out` / `lse` or the partials."""
    batch = cache_lengths.shape[0]
    num_workers = schedule.shape[0] - 1 - batch
    if rope_aware:
        # the rope columns are bf16 values in the row's last 128 bytes; the row's scale is column 0 of scales
        rope, rope_off, sc = blocks.view(torch.bfloat16), 256, scales
        s_strides = (scales.stride(0), scales.stride(2), scales.stride(3))
    else:
        rope, rope_off, sc, s_strides = blocks, 512, blocks, (0, 0, 0)
    _mla_decode_ring_kernel[(num_workers,)](
        q, out, lse, part_out, part_lse, input_row_offsets, cache_lengths, lookup_table, schedule, sink, blocks,
        rope, sc, batch, q.shape[1], num_workers, layer_idx, mask_code, window, scale * _LOG2E, blocks.shape[0],
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), part_out.stride(0),
        part_out.stride(1), part_lse.stride(0), lookup_table.stride(0), blocks.stride(0), blocks.stride(2),
        blocks.stride(3), rope.stride(0), rope.stride(2), rope.stride(3), *s_strides,
        PAGE_SIZE=blocks.shape[3], ROPE_OFF=rope_off, HAS_SINK=has_sink, NUM_SLOTS=slots, num_warps=4,
        **pdl_kwargs(pdl))


def decode_ws_ready(q, blocks, out, scales, q_scale, rope_aware: bool, layer_idx: int) -> bool:
    """Whether the warp-specialized kernel (`kernels.mla_decode_ws`) can take this call: Triton 3.6 on a Hopper
    GPU, bf16 q, cache and output (unit last stride), DeepSeek's 512 + 64 dims, heads a multiple of 64 (a tile:
    64 heads of a token) or a divisor of 64 (a tile: the heads of 64 / H tokens), pages a multiple of 64 slots,
    no FP8 scales, TMA-readable q and cache."""
    heads = q.shape[1]
    return (_WS_AVAILABLE and is_hopper(q.device) and scales is None and q_scale is None
            and not rope_aware and out.dtype == torch.bfloat16 and out.shape[-1] == 512 and out.stride(-1) == 1
            and q.shape[-1] == 576
            and blocks.shape[5] == 576 and (heads % 64 == 0 or 64 % heads == 0) and blocks.shape[3] % 64 == 0
            and _ws_q_rows(q) is not None and _ws_cache_rows(blocks, layer_idx) is not None)


def _launch_ws(q, input_row_offsets, blocks, cache_lengths, lookup_table, layer_idx: int, scale: float,
               mask_code: int, window: int, out, lse, schedule, sink, part_out, part_lse, num_tiles: int,
               pdl: bool) -> None:
    """`_mla_decode_ws_kernel` over the Triton kernel's grid (64-row tiles), with its partial-result buffers."""
    batch = cache_lengths.shape[0]
    num_workers = schedule.shape[0] - 1 - batch
    cache2d, page_rows, layer_row0 = _ws_cache_rows(blocks, layer_idx)
    q2d = _ws_q_rows(q)
    out2d = _ws_out_rows(out)
    split = num_workers > 1  # as `launch_decode` sized part_out (a [1, 1, 1] placeholder when unsplit)
    # TMA stores of the output and partial tiles (`_stage_and_store`) only when every tile is 64 heads of one
    # token: they write all 64 rows unmasked, and a tile of several tokens' heads can end inside the next
    # sequence's rows; and out must be rows of 512
    tma_out = q.shape[1] % 64 == 0 and out2d is not None
    # the descriptors exist in every call (the kernel's signature); unused ones describe small spare tensors
    if out2d is None:
        out2d = torch.empty((64, out.shape[-1]), dtype=out.dtype, device=out.device)
    po2d = (part_out.view(-1, part_out.shape[-1]) if split
            else torch.empty((64, out.shape[-1]), dtype=torch.float32, device=out.device))

    def desc(x2d, block):
        dtype = gl.float32 if x2d.dtype == torch.float32 else gl.bfloat16
        return GluonTensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    _mla_decode_ws_kernel[(num_workers * num_tiles,)](
        desc(q2d, [64, 256]), desc(q2d, [64, 64]), desc(cache2d, [64, 256]), desc(cache2d, [64, 64]), out, lse,
        input_row_offsets, cache_lengths, lookup_table, schedule, sink, part_out, part_lse, desc(out2d, [64, 256]),
        desc(po2d, [64, 64]),
        batch, q.shape[1], num_tiles, mask_code, window, scale * _LOG2E, blocks.shape[3], page_rows,
        layer_row0, lookup_table.stride(0), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
        part_out.stride(0), part_out.stride(1), part_lse.stride(0),
        HAS_SINK=sink is not lse, CONSUMER_REGS=240, TMA_OUT=tma_out, num_warps=4, **pdl_kwargs(pdl))


def decode_ws16_ready(q, blocks, out, scales, q_scale, rope_aware: bool, layer_idx: int, max_q: int) -> bool:
    """Whether the warp-specialized 16-row kernel (`kernels.mla_decode_ws16`) can take this call: Triton 3.6 on
    a Hopper GPU, a bf16 q (no `q_scale`) with the rope-aware FP8 cache (float32 scales), DeepSeek's dims, at
    most 16 rows (query tokens x heads) per sequence, pages a multiple of 64 slots, TMA-readable q and cache;
    and only while `WS16_ENABLED`."""
    return (WS16_ENABLED and _WS_AVAILABLE and is_hopper(q.device) and rope_aware and q_scale is None
            and scales is not None and scales.dtype == torch.float32 and q.dtype == torch.bfloat16 and q.shape[-1] == 576
            and blocks.shape[5] == 640 and out.shape[-1] == 512 and out.stride(-1) == 1
            and q.shape[1] * max(1, max_q) <= 16 and blocks.shape[3] % 64 == 0 and _ws_q_rows(q) is not None
            and _ws_cache_rows(blocks, layer_idx, torch.float8_e4m3fn) is not None)


# shared-memory ring slots (32 rows each) of `_mla_decode_ws16_kernel` (3: 225 KB in all), its widen warps and
# the registers of its widen and loader partitions. H200 (ws16_variants.py, BENCHMARKS.md, nineteenth session):
# 4 widen warps B64 N4096 81.1 us, B128 147.0, B1 N16384 13.5; 8 warps 83.1, 152.4, 13.7. 128 widen registers since
# the widen warps read one half ahead (twenty-first session): with 96 they spilled (88.2 against 79.0 us at B64)
WS16_SLOTS = 3
WS16_WIDEN_WARPS = 4
WS16_WIDEN_REGS = 128
WS16_LOADER_REGS = 48


# The register-operand sibling (`kernels.mla_decode_ws16_rs`): its ring slots (6: 218 KB in all; 4 were 10-14%
# slower, 8 no faster: BENCHMARKS.md, twenty-third session), consumer 1's and the loader's registers (consumer 0 gets the rest: 256). H200 (BENCHMARKS.md,
# twenty-second session, benchmarks/results/session-22/time-ws16_pp-5497e6c.txt): 232/24 and 216/40 within 1%.
WS16_RS_SLOTS = 6
WS16_RS_CONSUMER_REGS = 232
WS16_RS_LOADER_REGS = 24
# Which 16-row FP8 kernel a call runs: None picks by the plan's `long_pieces`; "widen" or "registers" forces
# one (the tests run every ws16 case on both).
WS16_KERNEL: str | None = None


def pieces_are_long(batch: int, max_cache_length: int, num_workers: int) -> bool:
    """Whether a schedule's pieces are long: about `configs.decode.WS16_RS_MIN_BLOCKS` 64-key blocks or more
    each, estimated from the longest sequence's keys (0: unknown, short) as batch x its blocks over
    max(workers, batch). The plan's `long_pieces`."""
    blocks = batch * triton.cdiv(max_cache_length, 64)
    return blocks >= decode_configs.WS16_RS_MIN_BLOCKS * max(num_workers, batch)


def ws16_use_registers(long_pieces: bool) -> bool:
    """Whether the 16-row FP8 decode runs its register-operand kernel: on long pieces, where its throughput wins
    (on short ones its longer start and end per piece lose), unless `WS16_KERNEL` forces a kernel."""
    if WS16_KERNEL is not None:
        if WS16_KERNEL not in ("widen", "registers"):
            raise ValueError(f"Invalid _triton_decode.WS16_KERNEL: expected None, 'widen' or 'registers', "
                             f"got {WS16_KERNEL!r}")
        return WS16_KERNEL == "registers"
    return long_pieces


def _launch_ws16(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx: int, scale: float,
                 mask_code: int, window: int, out, lse, schedule, sink, part_out, part_lse, pdl: bool,
                 registers: bool) -> None:
    """`_mla_decode_ws16_kernel`, or with `registers` `_mla_decode_ws16_rs_kernel`, one program per worker,
    writing `out` / `lse` or the partials."""
    batch = cache_lengths.shape[0]
    num_workers = schedule.shape[0] - 1 - batch
    lat2d, page_rows, layer_row0 = _ws_cache_rows(blocks, layer_idx, torch.float8_e4m3fn)
    # the 640-byte rows as int32 values (bits copied as they are): boxes of the 128 latent and the 32 rope
    # columns of 32 rows (a ring slot); the register-operand kernel's boxes are 32 columns wide, swizzled
    rows32 = lat2d.view(torch.uint8).view(torch.int32)
    q2d = _ws_q_rows(q)

    def desc(x2d, block, dtype):
        return GluonTensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    if registers:
        ring = gl.NVMMASharedLayout(128, 32, 2)
        lat_desc = GluonTensorDescriptor.from_tensor(rows32, [32, 32], ring)
        rope_desc = GluonTensorDescriptor.from_tensor(rows32, [32, 32], ring)
        kernel = _mla_decode_ws16_rs_kernel
        consts = dict(SLOTS=WS16_RS_SLOTS, CONSUMER_REGS=WS16_RS_CONSUMER_REGS, LOADER_REGS=WS16_RS_LOADER_REGS)
    else:
        lat_desc = GluonTensorDescriptor.from_tensor(rows32, [32, 128], gl.NVMMASharedLayout(0, 32, 2))
        rope_desc = GluonTensorDescriptor.from_tensor(rows32, [32, 32], gl.NVMMASharedLayout(0, 32, 2))
        kernel = _mla_decode_ws16_kernel
        consts = dict(SLOTS=WS16_SLOTS, WIDEN_WARPS=WS16_WIDEN_WARPS, WIDEN_REGS=WS16_WIDEN_REGS,
                      LOADER_REGS=WS16_LOADER_REGS)
    kernel[(num_workers,)](
        desc(q2d, [16, 128], gl.bfloat16), desc(q2d, [16, 64], gl.bfloat16), lat_desc, rope_desc, out, lse,
        input_row_offsets, cache_lengths, lookup_table, schedule,
        sink, part_out, part_lse, scales,
        batch, q.shape[1], mask_code, window, scale * _LOG2E, blocks.shape[3], page_rows, layer_row0,
        layer_idx * scales.stride(2), lookup_table.stride(0), out.stride(0), out.stride(1), lse.stride(0),
        lse.stride(1), part_out.stride(0), part_out.stride(1), part_lse.stride(0), scales.stride(0),
        scales.stride(3),
        HAS_SINK=sink is not lse, num_warps=4, **consts, **pdl_kwargs(pdl))


def launch_decode(q, input_row_offsets, blocks, cache_lengths, lookup_table, layer_idx: int, scale: float,
                  mask_code: int, window: int, out, lse, schedule, *, max_seq_length: int, long_pieces: bool = False,
                  attn_sink=None,
                  qk_rope_head_dim: int = 64, scales=None, q_scale=None, quant_granularity: int = 0,
                  rope_aware: bool = False, config: DecodeConfig | None = None,
                  combine_config: CombineConfig | None = None) -> None:
    """Run the dense decode with a built schedule; fills `out` `[T, H, kv_lora_rank]` and `lse` `[T, H]`.
    `long_pieces` (the plan's) picks between the 16-row FP8 kernels (`ws16_use_registers`).

    `scales` (float32 `[num_blocks, 1, num_layers, page_size, 1, ceil(head_size / G)]`) dequantizes an FP8
    cache with one scale per `quant_granularity` columns; `q_scale` (float32 `[T]`) an FP8 q. `rope_aware`:
    the rope-aware FP8 row (and an FP8 q in the same layout).
    Allocates only the float32 partial results of split sequences (`[2W, rows, kv_lora_rank]`, sized by host
    ints), and nothing when the schedule has a single worker.
    """
    num_rows, num_heads = q.shape[0], q.shape[1]
    batch = cache_lengths.shape[0]
    num_workers = schedule.shape[0] - 1 - batch
    if num_rows == 0 or batch == 0 or num_heads == 0:
        return
    kv_lora_rank, rope = _check_dims(q, blocks, out, qk_rope_head_dim, rope_aware)
    interpret = interpreter_enabled()
    max_q = max(1, max_seq_length)
    q_fp8 = q.dtype == torch.float8_e4m3fn
    quant = scales is not None or q_fp8
    group, modes = _scale_modes(blocks, scales, quant_granularity, kv_lora_rank, rope, rope_aware)
    if rope_aware:
        if scales is None:
            raise ValueError("Invalid scales: expected float32 scales for the rope-aware FP8 cache, got None")
        # the rope columns are bf16 values in the last 2 * rope bytes of the row (of q's too when it is FP8)
        rope_view, rope_off = blocks.view(torch.bfloat16), kv_lora_rank // 2
        q_rope, q_rope_off = (q.view(torch.bfloat16), kv_lora_rank // 2) if q_fp8 else (q, kv_lora_rank)
    else:
        rope_view, rope_off, q_rope, q_rope_off = blocks, kv_lora_rank, q, kv_lora_rank
    if quant:
        cd = compute_dtype(q.dtype, blocks.dtype, rope_aware)
        ieee = cd == torch.float32
    else:
        cd = q.dtype
        ieee = torch.float32 in (q.dtype, blocks.dtype) or q.dtype != blocks.dtype
    ws_ok = not interpret and decode_ws_ready(q, blocks, out, scales, q_scale if q_fp8 else None, rope_aware,
                                              layer_idx)
    ring_ok = not interpret and decode_ring_ready(q, blocks, out, scales, q_scale if q_fp8 else None, rope_aware,
                                                  max_q)
    ws16_ok = not interpret and decode_ws16_ready(q, blocks, out, scales, q_scale if q_fp8 else None, rope_aware,
                                                  layer_idx, max_q)
    # the heuristic takes the ring kernel only on schedules of more workers than SMs (a plan for it schedules
    # two per SM)
    ring_pick = ring_ok and num_workers > _num_sms(q.device)
    if config is None:
        per_sm = launch_programs_per_sm(rope_aware=rope_aware, num_workers=num_workers,
                                        tiles=triton.cdiv(max_q * num_heads, block_m_for(num_heads, max_q)),
                                        device=q.device, interpret=interpret)
        config = heuristic(num_heads=num_heads, max_q=max_q, kv_lora_rank=kv_lora_rank, rope_dim=rope,
                           q_dtype=q.dtype, cache_dtype=blocks.dtype, batch=batch, interpret=interpret,
                           compute_dtype=cd if quant else None, tile_scales=modes[0] in (2, 3),
                           programs_per_sm=per_sm, warp_specialized=ws_ok, ring=ring_pick, ws16=ws16_ok)
    cfg = config
    if cfg.ring_slots and not ring_ok:
        raise ValueError(f"Invalid config: expected ring_slots 0 for a call the Gluon ring kernel cannot take "
                         f"(see decode_ring_ready), got {cfg.ring_slots}")
    if cfg.ring_slots and not 2 <= cfg.ring_slots <= 8:
        # one slot cannot hold a block while the next one is copied (the copy schedule needs two)
        raise ValueError(f"Invalid config: expected ring_slots 0 or 2 to 8, got {cfg.ring_slots}")
    max_rows = max_q * num_heads
    num_tiles = triton.cdiv(max_rows, cfg.block_m)
    split = num_workers > 1
    rows_pad = num_tiles * cfg.block_m if split else 1
    part_out = torch.empty((2 * num_workers if split else 1, rows_pad, kv_lora_rank if split else 1),
                           dtype=torch.float32, device=q.device)
    part_lse = torch.empty((part_out.shape[0], rows_pad), dtype=torch.float32, device=q.device)
    sink = attn_sink if attn_sink is not None else lse
    # programmatic dependent launches (Hopper): the kernels wait for the previous kernel at their start
    pdl = programmatic_launch(q.device, interpret)
    s_strides = (scales.stride(0), scales.stride(2), scales.stride(3)) if scales is not None else (0, 0, 0)
    if cfg.ws16:
        if not ws16_ok:
            raise ValueError("Invalid config: expected ws16 False for a call the Gluon 16-row kernel cannot take "
                             "(see decode_ws16_ready; the kernel is off while _triton_decode.WS16_ENABLED is "
                             "False), got True")
        _launch_ws16(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx, scale, mask_code,
                     window, out, lse, schedule, sink, part_out, part_lse, pdl,
                     ws16_use_registers(long_pieces))
    elif cfg.ring_slots:
        _launch_ring(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx, scale, mask_code,
                     window, out, lse, schedule, sink, part_out, part_lse, cfg.ring_slots, attn_sink is not None,
                     rope_aware, pdl)
    elif cfg.warp_specialized and cfg.block_m == 64 and ws_ok:
        _launch_ws(q, input_row_offsets, blocks, cache_lengths, lookup_table, layer_idx, scale, mask_code, window,
                   out, lse, schedule, sink, part_out, part_lse, num_tiles, pdl)
    else:
        _mla_decode_kernel[(num_workers * num_tiles,)](
            q, out, lse, blocks, input_row_offsets, cache_lengths, lookup_table, schedule, sink, part_out, part_lse,
            scales if scales is not None else blocks, q_scale if q_fp8 else q, rope_view, q_rope,
            batch, num_heads, num_workers, num_tiles, layer_idx, blocks.shape[3], mask_code, window, scale * _LOG2E,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1),
            lookup_table.stride(0), blocks.stride(0), blocks.stride(2), blocks.stride(3), part_out.stride(0),
            part_out.stride(1), part_lse.stride(0), *s_strides, rope_view.stride(0), rope_view.stride(2),
            rope_view.stride(3), q_rope.stride(0), q_rope.stride(1),
            KV_LORA_RANK=kv_lora_rank, ROPE_DIM=rope, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            HAS_SINK=attn_sink is not None, BLOCK_IN_PAGE=blocks.shape[3] % cfg.block_n == 0, IEEE=ieee,
            INTERPRET=interpret, QUANT=quant, Q_SCALED=q_fp8, G=group, LAT_MODE=modes[0], LAT_NG=modes[1],
            LAT_GS=modes[2], ROPE_MODE=modes[3], ROPE_NG=modes[4], ROPE_GS=modes[5], CD=_TL_DTYPES[cd],
            ROPE_AWARE=rope_aware, ROPE_OFF=rope_off, Q_ROPE_OFF=q_rope_off, SPLIT_QS=q_fp8 and rope_aware,
            PREFETCH_TABLE=cfg.prefetch_table, UNMASKED_INTERIOR=cfg.unmasked_interior, PDL=pdl,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl_kwargs(pdl),
            **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))
    if split:
        _launch_combine(out, lse, input_row_offsets, schedule, sink, part_out, part_lse, batch=batch,
                        num_heads=num_heads, max_rows=max_rows, has_sink=attn_sink is not None,
                        config=combine_config, interpret=interpret)


def _launch_combine(out, lse, input_row_offsets, schedule, sink, part_out, part_lse, *, batch: int,
                    num_heads: int, max_rows: int, has_sink: bool, config: CombineConfig | None,
                    interpret: bool) -> None:
    """`_mla_decode_combine_kernel`: merge the split sequences' partials into `out` / `lse`."""
    num_workers = schedule.shape[0] - 1 - batch
    kv_lora_rank = out.shape[-1]
    ccfg = fit_combine_grid(config or combine_heuristic(num_workers=num_workers, batch=batch,
                                                        kv_lora_rank=kv_lora_rank, rows=max_rows,
                                                        interpret=interpret),
                            max_rows=max_rows, kv_lora_rank=kv_lora_rank)
    grid = (batch, triton.cdiv(max_rows, ccfg.block_r), kv_lora_rank // ccfg.block_dv)
    # the interpreter has no programmatic dependent launch (nor inline assembly)
    pdl = ccfg.pdl and programmatic_launch(out.device, interpret)
    _mla_decode_combine_kernel[grid](
        out, lse, input_row_offsets, schedule, sink, part_out, part_lse, batch, num_heads, num_workers,
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), part_out.stride(0), part_out.stride(1),
        part_lse.stride(0),
        BLOCK_R=ccfg.block_r, BLOCK_DV=ccfg.block_dv, BLOCK_P=ccfg.block_p, HAS_SINK=has_sink, PDL=pdl,
        BLOCK_T=ccfg.block_t, num_warps=ccfg.num_warps, **pdl_kwargs(pdl))


def decode(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx: int, scale: float,
           mask_code: int, window: int, num_partitions: int, out, lse, *, plan_args=None, plan_schedule=None,
           max_seq_length: int = 1, long_pieces: bool = False, fold_shared_index: bool = False, q_scale=None,
           rope_aware: bool = False,
           qk_rope_head_dim: int = 64, indices=None, topk_lengths=None, attn_sink=None, extra_blocks=None,
           extra_scales=None, extra_indices=None, extra_topk_lengths=None, quant_granularity: int = 0,
           extra_quant_granularity: int = 0) -> None:
    """The launcher the custom op calls (same arguments as the reference, plus the plan's tensors).

    Handles the dense path (every mask, any n_b, sinks, LSE, bf16/fp16/fp32, plain FP8 caches with any
    granularity, the rope-aware FP8 row, FP8 q with q_scale). A `num_partitions` that differs
    from the plan's worker count gets a fresh schedule built here on the device.
    """
    unsupported = [name for name, value in (("indices", indices), ("extra_blocks", extra_blocks)) if value is not None]
    if unsupported:
        raise NotImplementedError(f"pagedmla.mla_decode_kv_cache_ragged: the Triton kernel does not support "
                                  f"{unsupported} yet; use backend='reference'")
    batch = cache_lengths.shape[0]
    schedule = plan_schedule
    if schedule is None or schedule.dim() != 2 or schedule.shape[0] - 1 - batch != num_partitions:
        cfg = plan_config(batch=batch, num_heads=q.shape[1], max_q=max_seq_length, max_keys=1, device=q.device,
                          num_partitions=num_partitions)
        schedule = torch.empty((1 + cfg.num_workers + batch, 4), dtype=torch.int32, device=q.device)
        fill_schedule(schedule, input_row_offsets, cache_lengths, cfg)
    launch_decode(q, input_row_offsets, blocks, cache_lengths, lookup_table, layer_idx, scale, mask_code, window,
                  out, lse, schedule, max_seq_length=max_seq_length, long_pieces=long_pieces,
                  attn_sink=attn_sink,
                  qk_rope_head_dim=qk_rope_head_dim, scales=scales, q_scale=q_scale,
                  quant_granularity=quant_granularity, rope_aware=rope_aware)
