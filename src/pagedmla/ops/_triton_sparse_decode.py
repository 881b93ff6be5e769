"""Host launcher of the Triton sparse (top-k) MLA decode (registered in `ops/decode.py` as the Triton backend of
"mla_sparse_decode").

`sparse_decode` takes exactly the arguments the custom op passes to the reference and fills `out`
`[T, H, kv_lora_rank]` and `lse` `[T, H]`. The grid is sized by host ints only (T, H, the batch size, the index
columns, `max_seq_length` with `fold_shared_index`), so a captured CUDA graph replays with new indices and
lengths. It allocates only the float32 partials when a group's indices are split across programs.
Inputs were validated by the public function; this module checks only what the kernels add (power-of-two
dimensions, the byte layout of FP8 rows).
"""

from __future__ import annotations

import math

import torch
import triton

from ..configs.sparse_decode import RING_UNFOLD_MAX_Q, SparseDecodeConfig, combine_tile, heuristic, ws_config
from ..kernels.mla_sparse_decode import _mla_sparse_decode_combine_kernel, _mla_sparse_decode_kernel
from ._dispatch import (
    gluon_kernels_available,
    interpreter_enabled,
    is_hopper,
    ring_dtypes_ok,
    ring_layout_ok,
)
from ._fp8_tiles import _FP8, _TL_DTYPES, _is_pow2, _tile_mode, compute_dtype
from ._triton_decode import pdl_kwargs, programmatic_launch

_RING_AVAILABLE = gluon_kernels_available()
if _RING_AVAILABLE:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    from ..kernels.mla_sparse_decode_ring import _mla_sparse_decode_ring_kernel
    from ..kernels.mla_sparse_decode_ws import _mla_sparse_decode_ws_kernel
    from ._triton_decode import _ws_q_rows

# logits are scaled by scale * log2(e) so the kernels use exp2
_LOG2E = 1.0 / math.log(2.0)
_MAX_SPLITS = 64


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def _stream(blocks, scales, granularity: int, kv_lora_rank: int, rope_dim: int, rope_aware: bool, name: str):
    """Pointers, strides and scale modes of one cache: (blocks, rope view, scales, strides x 9, G, modes x 6)."""
    head_size = blocks.shape[-1]
    if rope_aware:
        if blocks.dtype != _FP8 or scales is None or head_size != kv_lora_rank + 2 * rope_dim:
            raise ValueError(f"Invalid {name}: expected float8_e4m3fn rows of {kv_lora_rank + 2 * rope_dim} bytes "
                             f"with scales (rope-aware), got {blocks.dtype} rows of {head_size}")
        try:
            rope = blocks.view(torch.bfloat16)
        except RuntimeError as err:
            raise ValueError(f"Invalid layout of {name}: expected rows viewable as bf16 for the rope-aware rope "
                             f"part, got strides {tuple(blocks.stride())}") from err
        rope_off = kv_lora_rank // 2
        # the latent bytes times the row's one scale (column 0 of the scales); the rope part is unscaled
        group, modes = head_size, (1, 1, kv_lora_rank, 0, 1, rope_dim)
    else:
        if head_size != kv_lora_rank + rope_dim:
            raise ValueError(f"Invalid shape of {name}: expected head_size {kv_lora_rank + rope_dim} "
                             f"(kv_lora_rank + qk_rope_head_dim), got {head_size}")
        rope, rope_off = blocks, kv_lora_rank
        if scales is None:
            group, modes = head_size, (0, 1, kv_lora_rank, 0, 1, rope_dim)
        else:
            group = granularity or head_size // scales.shape[-1]
            modes = _tile_mode(0, kv_lora_rank, group) + _tile_mode(kv_lora_rank, rope_dim, group)
    if blocks.stride(-1) != 1 or (scales is not None and scales.stride(-1) != 1):
        raise ValueError(f"Invalid layout of {name}: expected a contiguous last dimension")
    sc = scales if scales is not None else blocks
    strides = (blocks.stride(0), blocks.stride(2), blocks.stride(3), rope.stride(0), rope.stride(2), rope.stride(3),
               sc.stride(0) if scales is not None else 0, sc.stride(2) if scales is not None else 0,
               sc.stride(3) if scales is not None else 0)
    return blocks, rope, sc, strides, rope_off, group, modes


def sparse_ring_ready(q, blocks, out, scales, q_scale, *, rope_aware: bool, fold: bool, has_extra: bool) -> bool:
    """Whether the Gluon ring kernel (`kernels.mla_sparse_decode_ring`) can take this call: Triton 3.6 on a Hopper
    GPU; q and cache both bf16 or both fp16 without scales, or a bf16 q with the rope-aware FP8 cache (its
    scales float32 and contiguous); DeepSeek's 512 + 64 dims; at most 16 heads; one query token per index row (no
    fold_shared_index); no extra stream; unit last strides; a 16-byte aligned cache whose page, layer and slot
    strides are multiples of 32 bytes (the copies are 16 bytes wide, and the compiler knows a stride's alignment
    only from its value's divisibility by 16 elements: 2-byte elements, or the rope-aware row's bf16 view)."""
    scales_ok = (scales is not None and scales.dtype == torch.float32 and scales.stride(-1) == 1 if rope_aware
                 else scales is None)
    return (_RING_AVAILABLE and is_hopper(q.device) and q_scale is None and not fold and not has_extra and scales_ok
            and ring_dtypes_ok(q.dtype, blocks.dtype, blocks.shape[-1], rope_aware) and q.shape[1] <= 16
            and q.shape[-1] == 576 and out.shape[-1] == 512 and ring_layout_ok(q, blocks, out))


def sparse_ws_ready(q, blocks, out, scales, q_scale, *, rope_aware: bool, has_extra: bool) -> bool:
    """Whether the warp-specialized Gluon kernel (`kernels.mla_sparse_decode_ws`) can take this call: Triton 3.6
    on a Hopper GPU; a bf16 q (no q_scale) with the rope-aware FP8 cache (its scales float32); DeepSeek's
    512 + 64 dims; a multiple of 64 heads; a bf16 output; no extra stream; q readable by TMA as `[T * H, 576]`
    rows; the ring kernels' cache layout (16-byte copies)."""
    return (_RING_AVAILABLE and rope_aware and is_hopper(q.device) and q_scale is None and not has_extra
            and scales is not None and scales.dtype == torch.float32 and scales.stride(-1) == 1
            and ring_dtypes_ok(q.dtype, blocks.dtype, blocks.shape[-1], rope_aware) and q.shape[1] % 64 == 0
            and q.shape[-1] == 576 and out.shape[-1] == 512 and out.dtype == torch.bfloat16
            and ring_layout_ok(q, blocks, out) and _ws_q_rows(q) is not None)


def _launch_ws(q, out, lse, part_out, part_lse, offsets, sink, indices, topk_lengths, stream, layer_idx: int,
               scale: float, splits: int, part_strides: tuple, has_sink: bool, fold: bool, pdl: bool) -> None:
    """`_mla_sparse_decode_ws_kernel` over (tokens x 64-head tiles, splits), writing `out` / `lse` or the
    partials; `stream` is the cache as `_stream` returns it; `pdl`: a programmatic dependent launch."""
    blocks, rope, scales, strides, rope_off = stream[:5]
    page_size = blocks.shape[3]
    q2d = _ws_q_rows(q)
    num_tiles = q.shape[1] // 64

    def desc(block):
        return GluonTensorDescriptor.from_tensor(q2d, block, gl.NVMMASharedLayout.get_default_for(block,
                                                                                                  gl.bfloat16))
    _mla_sparse_decode_ws_kernel[(q.shape[0] * num_tiles, splits)](
        desc([64, 256]), desc([64, 64]), out, lse, part_out, part_lse, offsets, sink, indices, topk_lengths, blocks,
        rope, scales, topk_lengths.shape[0], q.shape[1], num_tiles, splits, layer_idx, scale * _LOG2E,
        min(blocks.shape[0] * page_size, 2**31 - 1), indices.shape[1],
        out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), *part_strides,
        indices.stride(0), indices.stride(1), *strides,
        PAGE_SIZE=page_size, ROPE_OFF=rope_off, FOLD=fold, HAS_SINK=has_sink, SPLIT=splits > 1,
        CONSUMER_REGS=240, num_warps=4, **pdl_kwargs(pdl))


def _launch_ring(q, out, lse, part_out, part_lse, offsets, sink, indices, topk_lengths, stream, layer_idx: int,
                 scale: float, splits: int, part_strides: tuple, has_sink: bool, slots: int, pdl: bool) -> None:
    """`_mla_sparse_decode_ring_kernel` over (query rows, splits), writing `out` / `lse` or the partials; `stream`
    is the cache as `_stream` returns it; `pdl`: a programmatic dependent launch."""
    blocks, rope, scales, strides, rope_off = stream[:5]
    page_size = blocks.shape[3]
    _mla_sparse_decode_ring_kernel[(q.shape[0], splits)](
        q, out, lse, part_out, part_lse, offsets, sink, indices, topk_lengths, blocks, rope, scales,
        topk_lengths.shape[0], q.shape[1], splits, layer_idx, scale * _LOG2E,
        min(blocks.shape[0] * page_size, 2**31 - 1), indices.shape[1],
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), *part_strides,
        indices.stride(0), indices.stride(1), *strides,
        PAGE_SIZE=page_size, ROPE_OFF=rope_off, HAS_SINK=has_sink, SPLIT=splits > 1, NUM_SLOTS=slots, num_warps=4,
        **pdl_kwargs(pdl))


def _split_count(num_partitions: int, default: int) -> int:
    """The config's split unless the caller forced one (`num_partitions` > 0)."""
    if num_partitions and num_partitions > 0:
        return max(1, min(int(num_partitions), _MAX_SPLITS))
    return default


def sparse_decode(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx: int, scale: float,
                  mask_code: int, window: int, num_partitions: int, out, lse, *, plan_args=None, plan_schedule=None,
                  max_seq_length: int = 1, fold_shared_index: bool = False, q_scale=None, rope_aware: bool = False,
                  qk_rope_head_dim: int = 64, indices=None, topk_lengths=None, attn_sink=None, extra_blocks=None,
                  extra_scales=None, extra_indices=None, extra_topk_lengths=None, quant_granularity: int = 0,
                  extra_quant_granularity: int = 0, config: SparseDecodeConfig | None = None) -> None:
    """The launcher the custom op calls for sparse decode (same arguments as the reference, plus the plan's).

    Handles every sparse feature: -1 and out-of-pool indices, per-sequence top-k lengths, the extra stream,
    sinks, bf16/fp16/fp32 and FP8 caches (any granularity, and the rope-aware row), FP8 q with q_scale, and
    fold_shared_index (one gather per sequence for all its tokens). `num_partitions` > 0 forces the number of
    programs that share one index list (0: the heuristic's). `config` overrides the heuristic (tuning only).
    """
    if indices is None:
        raise ValueError("Invalid indices: expected int32 [T, topk] for the sparse decode, got None")
    if mask_code != 0:
        raise ValueError(f"Invalid mask: expected 'null' (code 0) for sparse decode, got code {mask_code}")
    num_rows, num_heads = q.shape[0], q.shape[1]
    batch = topk_lengths.shape[0]
    if num_rows == 0 or num_heads == 0 or batch == 0:
        return
    kv_lora_rank, rope = out.shape[-1], qk_rope_head_dim
    for name, value in (("kv_lora_rank", kv_lora_rank), ("qk_rope_head_dim", rope)):
        if value < 16 or not _is_pow2(value):
            raise ValueError(f"Invalid {name} for the Triton sparse decode: expected a power of two >= 16, got "
                             f"{value} (use backend='reference')")
    if rope_aware and q.dtype == _FP8:
        if q.shape[-1] != kv_lora_rank + 2 * rope:
            raise ValueError(f"Invalid shape of q: expected last dimension {kv_lora_rank + 2 * rope} (rope-aware "
                             f"FP8 row), got {q.shape[-1]}")
        q_rope, q_rope_off = q.view(torch.bfloat16), kv_lora_rank // 2
    else:
        if q.shape[-1] != kv_lora_rank + rope:
            raise ValueError(f"Invalid shape of q: expected last dimension {kv_lora_rank + rope}, got {q.shape[-1]}")
        q_rope, q_rope_off = q, kv_lora_rank
    main = _stream(blocks, scales, quant_granularity, kv_lora_rank, rope, rope_aware, "blocks")
    has_extra = extra_blocks is not None
    extra = _stream(extra_blocks, extra_scales, extra_quant_granularity, kv_lora_rank, rope, rope_aware,
                    "extra_blocks") if has_extra else main
    x_idx = extra_indices if has_extra else indices
    x_len = extra_topk_lengths if has_extra else topk_lengths

    interpret = interpreter_enabled()
    cd = compute_dtype(q.dtype, blocks.dtype, rope_aware)
    fold = fold_shared_index and max_seq_length > 1
    q_scale_ring = q_scale if q.dtype == _FP8 else None
    if (fold and config is None and not interpret and max_seq_length <= RING_UNFOLD_MAX_Q
            and sparse_ring_ready(q, blocks, out, scales, q_scale_ring, rope_aware=rope_aware, fold=False,
                                  has_extra=has_extra)):
        # the promise of shared index rows is a speed hint: the ring kernel reading each token's own row beats
        # the folded Triton tile at these sizes (RING_UNFOLD_MAX_Q); same answers
        fold = False
    rows_per_group = num_heads * max_seq_length if fold else num_heads
    num_groups = batch if fold else num_rows
    topk, x_topk = indices.shape[1], x_idx.shape[1] if has_extra else 0
    ring = not interpret and sparse_ring_ready(q, blocks, out, scales, q_scale_ring, rope_aware=rope_aware,
                                               fold=fold, has_extra=has_extra)
    ws = not interpret and sparse_ws_ready(q, blocks, out, scales, q_scale_ring, rope_aware=rope_aware,
                                           has_extra=has_extra)
    if config is None and ws:
        cfg = ws_config(num_tokens=num_rows, num_heads=num_heads, topk=topk, num_sms=_num_sms(q.device))
    else:
        cfg = config or heuristic(rows_per_group=rows_per_group, num_groups=num_groups, topk=topk + x_topk,
                                  q_dtype=q.dtype, cache_dtype=blocks.dtype, compute_dtype=cd,
                                  num_sms=_num_sms(q.device), interpret=interpret, rope_aware=rope_aware,
                                  ring=ring)
    if cfg.ws and not ws:
        raise ValueError("Invalid config: expected ws False for a call the warp-specialized kernel cannot take "
                         "(see sparse_ws_ready), got True")
    if cfg.ring_slots and not ring:
        raise ValueError(f"Invalid config: expected ring_slots 0 for a call the Gluon ring kernel cannot take "
                         f"(see sparse_ring_ready), got {cfg.ring_slots}")
    if cfg.ring_slots and not 2 <= cfg.ring_slots <= 8:
        # one slot cannot hold a block while the next one is copied (the copy schedule needs two)
        raise ValueError(f"Invalid config: expected ring_slots 0 or 2 to 8, got {cfg.ring_slots}")
    splits = _split_count(num_partitions, cfg.num_splits)
    num_tiles = triton.cdiv(rows_per_group, cfg.block_m)
    if splits > 1:
        part_out = torch.empty((splits, num_rows, num_heads, kv_lora_rank), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((splits, num_rows, num_heads), dtype=torch.float32, device=q.device)
    else:
        part_out = part_lse = lse
    po_strides = (part_out.stride(0), part_out.stride(1), part_out.stride(2)) if splits > 1 else (0, 0, 0)
    pl_strides = (part_lse.stride(0), part_lse.stride(1)) if splits > 1 else (0, 0)
    sink = attn_sink if attn_sink is not None else lse
    blk, rope_view, sc, strides, rope_off, group, modes = main
    x_blk, x_rope_view, x_sc, x_strides, _, x_group, x_modes = extra
    page_size, x_page_size = blk.shape[3], x_blk.shape[3]
    pool_rows = min(blk.shape[0] * page_size, 2**31 - 1)
    x_pool_rows = min(x_blk.shape[0] * x_page_size, 2**31 - 1)
    q_fp8 = q.dtype == _FP8
    # programmatic dependent launches on Hopper (see docs/layout.md): each kernel's launch overlaps the previous
    # kernel's end, and it waits for that kernel before touching memory
    pdl = programmatic_launch(q.device, interpret)
    if cfg.ws:
        _launch_ws(q, out, lse, part_out, part_lse, input_row_offsets, sink, indices, topk_lengths, main, layer_idx,
                   scale, splits, po_strides + pl_strides, attn_sink is not None, fold, pdl)
    elif cfg.ring_slots:
        _launch_ring(q, out, lse, part_out, part_lse, input_row_offsets, sink, indices, topk_lengths, main, layer_idx,
                     scale, splits, po_strides + pl_strides, attn_sink is not None, cfg.ring_slots, pdl)
    else:
        _mla_sparse_decode_kernel[(num_groups * num_tiles, splits)](
            q, q_rope, q_scale if q_fp8 else q, out, lse, part_out, part_lse, input_row_offsets, sink,
            indices, topk_lengths, blk, rope_view, sc, x_idx, x_len, x_blk, x_rope_view, x_sc,
            batch, num_heads, num_tiles, splits, layer_idx, scale * _LOG2E,
            page_size, pool_rows, topk, x_page_size, x_pool_rows, x_topk,
            q.stride(0), q.stride(1), q_rope.stride(0), q_rope.stride(1), out.stride(0), out.stride(1),
            lse.stride(0), lse.stride(1), *po_strides, *pl_strides,
            indices.stride(0), indices.stride(1), *strides,
            x_idx.stride(0), x_idx.stride(1), *x_strides,
            KV_LORA_RANK=kv_lora_rank, ROPE_DIM=rope, Q_ROPE_OFF=q_rope_off, ROPE_OFF=rope_off,
            G=group, LAT_MODE=modes[0], LAT_NG=modes[1], LAT_GS=modes[2],
            ROPE_MODE=modes[3], ROPE_NG=modes[4], ROPE_GS=modes[5],
            X_G=x_group, X_LAT_MODE=x_modes[0], X_LAT_NG=x_modes[1], X_LAT_GS=x_modes[2],
            X_ROPE_MODE=x_modes[3], X_ROPE_NG=x_modes[4], X_ROPE_GS=x_modes[5],
            FOLD=fold, HAS_EXTRA=has_extra, HAS_SINK=attn_sink is not None, Q_SCALED=q_fp8,
            SPLIT_QS=q_fp8 and rope_aware, SPLIT=splits > 1, SEARCH_STEPS=max(1, batch.bit_length()),
            CD=_TL_DTYPES[cd], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, INTERPRET=interpret,
            IEEE=cd == torch.float32, PREFETCH_INDICES=cfg.prefetch_indices, PDL=pdl, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, **pdl_kwargs(pdl))
    if splits > 1:
        block_r, block_dv = combine_tile(cfg, splits, kv_lora_rank)
        grid = (triton.cdiv(num_rows * num_heads, block_r), kv_lora_rank // block_dv)
        _mla_sparse_decode_combine_kernel[grid](
            out, lse, sink, part_out, part_lse, num_rows * num_heads, num_heads, splits,
            out.stride(0), out.stride(1), lse.stride(0), lse.stride(1), *po_strides, *pl_strides,
            BLOCK_R=block_r, BLOCK_DV=block_dv, BLOCK_S=triton.next_power_of_2(splits),
            HAS_SINK=attn_sink is not None, INTERPRET=interpret, PDL=pdl, num_warps=cfg.combine_num_warps,
            **pdl_kwargs(pdl))
