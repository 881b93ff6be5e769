"""Reference prefill: the chunk plan, latent-cache decompression and ragged MLA prefill attention."""

from __future__ import annotations

import torch

from ..masks import visible
from .attention import attend
from .paged import gather_physical, page_slots


def mla_prefill_plan(input_row_offsets, cache_lengths, page_size: int, buffer_size: int, max_chunks: int):
    """Lay the sequences' page-aligned totals `align_up(N_b, page_size)` end to end and cut into chunks.

    Returns (buffer_row_offsets [max_chunks, B+1], cache_offsets [max_chunks, B], buffer_lengths [max_chunks]),
    int32 on the offsets' device; unused chunks have buffer_length -1. Raises ValueError if more than
    max_chunks chunks are needed.
    """
    device = input_row_offsets.device
    offs = input_row_offsets.long().cpu()
    totals = cache_lengths.long().cpu() + (offs[1:] - offs[:-1])
    aligned = (totals + page_size - 1) // page_size * page_size
    starts = torch.zeros(aligned.numel() + 1, dtype=torch.long)
    starts[1:] = torch.cumsum(aligned, 0)
    line = int(starts[-1])
    num_chunks = (line + buffer_size - 1) // buffer_size
    if num_chunks > max_chunks:
        raise ValueError(f"Invalid buffer_size: the batch needs {num_chunks} chunks of {buffer_size} rows "
                         f"({line} page-aligned cache rows), expected at most max_chunks={max_chunks}")
    chunk_start = torch.arange(max_chunks, dtype=torch.long).unsqueeze(1) * buffer_size
    bro = (starts.unsqueeze(0) - chunk_start).clamp(0, buffer_size)
    co = (chunk_start - starts[:-1].unsqueeze(0)).clamp_min(0)
    lengths = torch.where(torch.arange(max_chunks) < num_chunks, bro[:, -1], torch.full_like(bro[:, -1], -1))
    return bro.to(torch.int32).to(device), co.to(torch.int32).to(device), lengths.to(torch.int32).to(device)


def _buffer_row_sources(buffer_row_offsets, cache_offsets, num_rows):
    """Sequence b and absolute cache position of buffer rows 0..num_rows-1."""
    bro = buffer_row_offsets.long()
    rows = torch.arange(num_rows, device=bro.device)
    seq = torch.searchsorted(bro[1:], rows, right=True).clamp_max(bro.numel() - 2)
    return seq, rows - bro[seq] + cache_offsets.long()[seq]


def mla_decompress_k_cache_ragged_paged(buffer_row_offsets, cache_offsets, buffer_length: int, weight, blocks,
                                        cache_lengths, lookup_table, scales, quant_granularity: int, layer_idx: int,
                                        k_latent_buffer, k_buffer) -> None:
    """Gather latent rows `[0, kv_lora_rank)` of the chunk into k_latent_buffer, then `k_buffer = latent @ weight.T`.

    Only rows below buffer_length are written.
    """
    if buffer_length <= 0:
        return
    kv_lora_rank = weight.shape[1]
    seq, pos = _buffer_row_sources(buffer_row_offsets, cache_offsets, buffer_length)
    block, slot, _ = page_slots(lookup_table, seq, pos, blocks.shape[3])
    rows = gather_physical(blocks, scales, layer_idx, 0, block, slot, granularity=quant_granularity)[:, 0, :kv_lora_rank]
    k_latent_buffer[:buffer_length] = rows.to(k_latent_buffer.dtype)
    latent = k_latent_buffer[:buffer_length].float()
    k_buffer[:buffer_length] = (latent @ weight.float().T).to(k_buffer.dtype)


def mla_prefill_kv_cache_ragged(q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, blocks,
                                cache_lengths, lookup_table, scales, quant_granularity: int, layer_idx: int,
                                scale: float, mask_code: int, window: int, out, lse) -> None:
    """Ragged MLA prefill over one chunk of decompressed keys; writes out [T, H, Dv] and lse [T, H].

    Query i of sequence b sits at absolute position `L_b + i`; key j of b is buffer row `bro[b] + j` at absolute
    position `co[b] + j`, visible when `< N_b` and allowed by the mask. K = [k row, cache rope columns].
    """
    nope = k.shape[-1]
    rope_dim = q.shape[-1] - nope
    offs = input_row_offsets.long().tolist()
    bro = buffer_row_offsets.long().tolist()
    co = cache_offsets.long().tolist()
    lens = cache_lengths.long().tolist()
    for b in range(len(offs) - 1):
        g0, g1 = offs[b], offs[b + 1]
        if g1 == g0:
            continue
        n_keys_buf = bro[b + 1] - bro[b]
        num_keys = lens[b] + (g1 - g0)
        q_pos = torch.arange(lens[b], lens[b] + g1 - g0).view(-1, 1)
        k_pos = co[b] + torch.arange(n_keys_buf).view(1, -1)
        vis = visible(q_pos, k_pos, num_keys, mask_code, window)
        block, slot, in_table = page_slots(lookup_table, b, k_pos.view(-1).to(lookup_table.device), blocks.shape[3])
        rope = gather_physical(blocks, scales, layer_idx, 0, block, slot,
                               granularity=quant_granularity)[:, 0, blocks.shape[-1] - rope_dim:]
        vis = vis.to(q.device) & in_table.view(1, -1)
        kb = k[bro[b]: bro[b + 1]].float()
        keys = torch.cat([kb, rope.unsqueeze(1).expand(-1, kb.shape[1], -1)], dim=-1)
        key_ok = vis.any(0)
        keys = torch.where(key_ok.view(-1, 1, 1), keys, torch.zeros_like(keys))
        vals = torch.where(key_ok.view(-1, 1, 1), v[bro[b]: bro[b + 1]].float(), torch.zeros(1, device=v.device))
        logits = scale * torch.einsum("shd,jhd->hsj", q[g0:g1].float(), keys)
        o, l_ = attend(logits, vis.unsqueeze(0), vals.transpose(0, 1).unsqueeze(1))
        out[g0:g1] = o.transpose(0, 1).to(out.dtype)
        lse[g0:g1] = l_.transpose(0, 1)
