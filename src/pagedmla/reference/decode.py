"""Reference MLA decode: dense (every mask, multi-token), sparse top-k with an extra stream, sinks, FP8, split-KV."""

from __future__ import annotations

import torch

from ..masks import visible
from .attention import apply_sink, attend, merge_states
from .paged import dequantize_rows, gather_physical, page_slots


def _query_rows(q, q_scale, rope_aware: bool, qk_rope_head_dim: int) -> torch.Tensor:
    """q as float32 `[T, H, kv_lora_rank + R]`; FP8 q is dequantized by its per-row q_scale."""
    if q.dtype != torch.float8_e4m3fn:
        return q.float()
    row_scale = q_scale.float().view(-1, 1, 1).expand(q.shape[0], q.shape[1], 1)
    if rope_aware:
        return dequantize_rows(q, row_scale, rope_aware=True, qk_rope_head_dim=qk_rope_head_dim)
    return q.float() * row_scale


def _sparse_keys(blocks, scales, granularity, layer_idx, idx, count, rope_aware, qk_rope_head_dim):
    """Keys `[n, topk, D]` and validity `[n, topk]` of physical indices; -1, out-of-pool ids and columns past
    `count` are invalid and read as zeros."""
    page_size = blocks.shape[3]
    cols = torch.arange(idx.shape[1], device=idx.device).view(1, -1)
    ok = (idx >= 0) & (idx < blocks.shape[0] * page_size) & (cols < count)
    safe = torch.where(ok, idx, torch.zeros_like(idx)).long()
    keys = gather_physical(blocks, scales, layer_idx, 0, safe // page_size, safe % page_size,
                           granularity=granularity, rope_aware=rope_aware, qk_rope_head_dim=qk_rope_head_dim)[:, :, 0]
    return torch.where(ok.unsqueeze(-1), keys, torch.zeros_like(keys)), ok


def mla_decode_kv_cache_ragged(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx: int,
                               scale: float, mask_code: int, window: int, num_partitions: int, out, lse, *,
                               q_scale=None, rope_aware: bool = False, qk_rope_head_dim: int = 64, indices=None,
                               topk_lengths=None, attn_sink=None, extra_blocks=None, extra_scales=None,
                               extra_indices=None, extra_topk_lengths=None, quant_granularity: int = 0,
                               extra_quant_granularity: int = 0) -> None:
    """Absorbed MLA decode; writes out `[T, H, kv_lora_rank]` and lse `[T, H]` (float32, sink excluded).

    Dense: keys are the cache rows `[0, N_b)` of the query's sequence under the mask at `q = L_b + s`.
    Sparse (indices given): keys are the physical rows named by the first `topk_lengths[b]` entries of the
    query's index row (-1 skipped), plus the extra stream's rows. V is the first kv_lora_rank columns of K.
    Keys are split into `num_partitions` contiguous parts whose results merge by LSE (tests the split math).
    """
    kv_lora_rank = out.shape[-1]
    qf = _query_rows(q, q_scale, rope_aware, qk_rope_head_dim)
    offs = input_row_offsets.long().tolist()
    lens = cache_lengths.long().tolist()
    page_size = blocks.shape[3]
    sink = None if attn_sink is None else attn_sink.float()
    for b in range(len(offs) - 1):
        g0, g1 = offs[b], offs[b + 1]
        if g1 == g0:
            continue
        qb = qf[g0:g1]
        if indices is None:
            num_keys = lens[b] + (g1 - g0)
            k_pos = torch.arange(num_keys, device=q.device)
            block, slot, _ = page_slots(lookup_table, b, k_pos, page_size)
            keys = gather_physical(blocks, scales, layer_idx, 0, block, slot, granularity=quant_granularity,
                                   rope_aware=rope_aware,
                                   qk_rope_head_dim=qk_rope_head_dim)[:, 0]
            q_pos = torch.arange(lens[b], lens[b] + g1 - g0, device=q.device).view(-1, 1)
            vis = visible(q_pos, k_pos.view(1, -1), num_keys, mask_code, window)
            logits = scale * torch.einsum("shd,nd->shn", qb, keys)
            values = keys[:, :kv_lora_rank]
        else:
            keys, vis = _sparse_keys(blocks, scales, quant_granularity, layer_idx, indices[g0:g1],
                                     int(topk_lengths[b]),
                                     rope_aware, qk_rope_head_dim)
            if extra_indices is not None:
                ek, ev = _sparse_keys(extra_blocks, extra_scales, extra_quant_granularity, layer_idx,
                                      extra_indices[g0:g1],
                                      int(extra_topk_lengths[b]), rope_aware, qk_rope_head_dim)
                keys, vis = torch.cat([keys, ek], dim=1), torch.cat([vis, ev], dim=1)
            logits = scale * torch.einsum("shd,snd->shn", qb, keys)
            values = keys[..., :kv_lora_rank].unsqueeze(1)
        vis = vis.unsqueeze(1)
        parts = torch.arange(logits.shape[-1], device=q.device).tensor_split(max(1, num_partitions))
        outs, lses = [], []
        for p in parts:
            v_p = values[..., p, :] if values.dim() == 4 else values[p]
            o, s = attend(logits[..., p], vis[..., p], v_p)
            outs.append(o)
            lses.append(s)
        o, s = merge_states(outs, lses)
        if sink is not None:
            o = apply_sink(o, s, sink)
        out[g0:g1] = o.to(out.dtype)
        lse[g0:g1] = s
