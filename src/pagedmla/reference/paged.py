"""Reading and writing rows of the paged cache, FP8 (de)quantization, ragged row bookkeeping."""

from __future__ import annotations

import torch

FP8_MAX = 448.0


def sequence_of_rows(input_row_offsets: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each row g of a ragged batch: its sequence b and its index t inside that sequence."""
    offs = input_row_offsets.long()
    rows = torch.arange(num_rows, device=offs.device)
    seq = torch.searchsorted(offs[1:], rows, right=True)
    return seq, rows - offs[seq]


def dequantize_rows(rows: torch.Tensor, row_scales: torch.Tensor | None, *, granularity: int | None = None,
                    rope_aware: bool = False, qk_rope_head_dim: int = 64) -> torch.Tensor:
    """Rows of a cache (or FP8 q) as float32.

    Plain FP8: element d is `x[d] * scale[d // G]` with `G = granularity` (needed when G does not divide the
    row: 576 with G = 128 and with G = 116 both have 5 scales; None means G divides it). Rope-aware row: `head_size - 2*R` e4m3 latent bytes times
    the row's single scale, then R bf16 rope values stored in the last `2*R` bytes (not scaled).
    """
    if row_scales is None:
        return rows.float()
    if rope_aware:
        rope_bytes = 2 * qk_rope_head_dim
        latent = rows[..., : rows.shape[-1] - rope_bytes].float() * row_scales[..., :1]
        rope = rows[..., rows.shape[-1] - rope_bytes:].contiguous().view(torch.bfloat16).float()
        return torch.cat([latent, rope], dim=-1)
    width = rows.shape[-1]
    group = granularity if granularity else width // row_scales.shape[-1]
    if -(-width // group) != row_scales.shape[-1]:
        raise ValueError(f"Invalid scales: expected ceil({width} / {group}) = {-(-width // group)} scales per row "
                         f"for granularity {group}, got {row_scales.shape[-1]}")
    return rows.float() * row_scales.repeat_interleave(group, dim=-1)[..., :width]


def quantize_rows(x: torch.Tensor, granularity: int, *, rope_aware: bool = False,
                  qk_rope_head_dim: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Float rows -> (e4m3 rows, float32 scales): one scale per `granularity` elements, amax / 448.

    Rope-aware: the latent part gets one scale per row and the last R values are stored as bf16 bytes,
    giving rows of `latent + 2*R` bytes and scales of shape `[..., 1]`.
    """
    x = x.float()
    if rope_aware:
        latent, rope = x[..., : x.shape[-1] - qk_rope_head_dim], x[..., x.shape[-1] - qk_rope_head_dim:]
        scale = (latent.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp_min(1e-12)
        q_lat = (latent / scale).to(torch.float8_e4m3fn)
        q_rope = rope.to(torch.bfloat16).contiguous().view(torch.float8_e4m3fn)
        return torch.cat([q_lat, q_rope], dim=-1), scale
    width = x.shape[-1]
    num_groups = -(-width // granularity)
    padded = torch.nn.functional.pad(x, (0, num_groups * granularity - width))
    groups = padded.unflatten(-1, (num_groups, granularity))
    scale = (groups.abs().amax(dim=-1) / FP8_MAX).clamp_min(1e-12)
    q = (groups / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).flatten(-2)[..., :width]
    return q, scale


def page_slots(lookup_table: torch.Tensor, b: torch.Tensor | int, positions: torch.Tensor,
               page_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(block, slot, in_table) of absolute positions of sequence b; positions past the table are clamped
    and flagged False so callers can mask them."""
    page = torch.div(positions, page_size, rounding_mode="floor")
    in_table = (page >= 0) & (page < lookup_table.shape[1])
    page = page.clamp(0, lookup_table.shape[1] - 1)
    block = lookup_table[b, page].long()
    return block, positions % page_size, in_table


def gather_physical(blocks: torch.Tensor, scales: torch.Tensor | None, layer_idx: int, kv: int,
                    block: torch.Tensor, slot: torch.Tensor, *, granularity: int | None = None,
                    rope_aware: bool = False, qk_rope_head_dim: int = 64) -> torch.Tensor:
    """float32 rows `[..., num_heads, head_size]` at (block, slot); block ids outside the pool read block 0
    (callers mask those keys)."""
    block = torch.where((block >= 0) & (block < blocks.shape[0]), block, torch.zeros_like(block))
    rows = blocks[block, kv, layer_idx, slot]
    row_scales = None if scales is None else scales[block, kv, layer_idx, slot]
    return dequantize_rows(rows, row_scales, granularity=granularity, rope_aware=rope_aware,
                           qk_rope_head_dim=qk_rope_head_dim)


def store_rows(blocks: torch.Tensor, layer_idx: int, kv: int, block: torch.Tensor, slot: torch.Tensor,
               values: torch.Tensor) -> None:
    """Write `values [..., num_heads, head_size]` (any float dtype) at (block, slot) in blocks' dtype."""
    blocks[block, kv, layer_idx, slot] = values.to(blocks.dtype)
