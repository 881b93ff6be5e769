"""Reference cache writes: projections stored into the paged cache, RMS norm and rope in place."""

from __future__ import annotations

import torch

from .paged import page_slots, sequence_of_rows, store_rows


def _new_token_slots(input_row_offsets, cache_lengths, lookup_table, page_size, num_rows):
    """(block, slot, position) of every new-token row g: position `L_b + t`."""
    seq, t = sequence_of_rows(input_row_offsets, num_rows)
    pos = cache_lengths.long()[seq] + t
    block, slot, _ = page_slots(lookup_table, seq, pos, page_size)
    return block, slot, pos


def k_matmul_ragged_paged(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table,
                          layer_idx: int) -> None:
    """MLA: `C = hidden_state @ weight.T` (float32) stored as the K row of each new token."""
    num_rows = hidden_state.shape[0]
    c = hidden_state.float() @ weight.float().T
    block, slot, _ = _new_token_slots(input_row_offsets, cache_lengths, lookup_table, blocks.shape[3], num_rows)
    store_rows(blocks, layer_idx, 0, block, slot, c.view(num_rows, 1, -1))


def kv_matmul_ragged_paged(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table,
                           layer_idx: int) -> None:
    """MHA: columns [0, Hkv*D) of `hidden_state @ weight.T` go to K (head c // D), the rest to V."""
    num_rows = hidden_state.shape[0]
    num_heads, head_size = blocks.shape[4], blocks.shape[5]
    c = (hidden_state.float() @ weight.float().T).view(num_rows, 2, num_heads, head_size)
    block, slot, _ = _new_token_slots(input_row_offsets, cache_lengths, lookup_table, blocks.shape[3], num_rows)
    store_rows(blocks, layer_idx, 0, block, slot, c[:, 0])
    store_rows(blocks, layer_idx, 1, block, slot, c[:, 1])


def rms_norm_key_cache(blocks, cache_lengths, lookup_table, gamma, input_row_offsets, layer_idx: int,
                       eps: float, max_seq_length: int | None = None) -> None:
    """In place: K rows of the new tokens, columns [0, len(gamma)): `x * rsqrt(mean(x^2) + eps) * gamma`.

    (max_seq_length sizes the Triton grid; the reference reads the row count from the offsets.)
    """
    cols = gamma.shape[0]
    num_rows = int(input_row_offsets[-1])
    block, slot, _ = _new_token_slots(input_row_offsets, cache_lengths, lookup_table, blocks.shape[3], num_rows)
    rows = blocks[block, 0, layer_idx, slot].float()
    x = rows[..., :cols]
    normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma.float()
    rows[..., :cols] = normed
    store_rows(blocks, layer_idx, 0, block, slot, rows)


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate pairs of the last axis of x (float32) by per-pair cos/sin `[..., R/2]`.

    interleaved: pairs (x[2i], x[2i+1]); otherwise pairs (x[i], x[i + R/2]) (GPT-NeoX style).
    """
    if interleaved:
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)


def fused_qk_rope_ragged(q_rope, input_row_offsets, blocks, cache_lengths, lookup_table, freqs_cis,
                         layer_idx: int, interleaved: bool, q_out) -> None:
    """Rope q (into q_out) and, in place, the last R columns of the new tokens' K rows, at `L_b + t`.

    Pair i rotates by `cos = freqs_cis[pos, 2i]`, `sin = freqs_cis[pos, 2i + 1]`.
    """
    num_rows, rope_dim = q_rope.shape[0], q_rope.shape[-1]
    block, slot, pos = _new_token_slots(input_row_offsets, cache_lengths, lookup_table, blocks.shape[3], num_rows)
    f = freqs_cis.float()[pos]
    cos, sin = f[:, 0::2], f[:, 1::2]
    q_out.copy_(rope_rotate(q_rope.float(), cos.unsqueeze(1), sin.unsqueeze(1), interleaved).to(q_out.dtype))
    rows = blocks[block, 0, layer_idx, slot].float()
    rows[..., -rope_dim:] = rope_rotate(rows[..., -rope_dim:], cos.unsqueeze(1), sin.unsqueeze(1), interleaved)
    store_rows(blocks, layer_idx, 0, block, slot, rows)
