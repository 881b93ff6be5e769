"""Adversarial paged inputs: shuffled lookup tables, NaN in every unused slot and page, huge block ids in
unused table entries, and the awkward lengths (0, 1, page-1, page, page+1, odd)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..cache import KVCacheParams, PagedKVCacheCollection, row_offsets

# Unused lookup-table entries hold this: any kernel that reads one through an address computation faults
# or reads far outside the pool, which the tests would see.
HUGE_BLOCK_ID = 2**30


def adversarial_lengths(page_size: int) -> list[int]:
    """0, 1, page-1, page, page+1 and an odd length past two pages (duplicates removed, order kept)."""
    seen: list[int] = []
    for n in (0, 1, page_size - 1, page_size, page_size + 1, 2 * page_size + 3):
        if n >= 0 and n not in seen:
            seen.append(n)
    return seen


@dataclass
class PagedBatch:
    """A paged cache collection with its ragged batch: `cache_lengths[b]` tokens cached, `new_lengths[b]` new."""

    kv: PagedKVCacheCollection
    input_row_offsets: torch.Tensor
    cache_lengths: list[int]
    new_lengths: list[int]

    @property
    def num_rows(self) -> int:
        return sum(self.new_lengths)

    @property
    def totals(self) -> list[int]:
        return [c + n for c, n in zip(self.cache_lengths, self.new_lengths)]

    def positions(self, b: int, length: int | None = None) -> list[tuple[int, int]]:
        """(block, slot) of positions 0..length-1 (default N_b) of sequence b."""
        ps = self.kv.page_size
        table = self.kv.lookup_table[b].tolist()
        n = self.totals[b] if length is None else length
        return [(table[p // ps], p % ps) for p in range(n)]

    def dense_rows(self, b: int, layer: int = 0, kv: int = 0) -> torch.Tensor:
        """The stored rows `[N_b, num_heads, head_size]` of sequence b, in logical order."""
        pos = self.positions(b)
        if not pos:
            return self.kv.blocks.new_zeros((0,) + tuple(self.kv.blocks.shape[-2:]))
        blk = torch.tensor([p[0] for p in pos], device=self.kv.device)
        slot = torch.tensor([p[1] for p in pos], device=self.kv.device)
        return self.kv.blocks[blk, kv, layer, slot]


def make_paged_batch(cache_lengths: Sequence[int], new_lengths: Sequence[int], *, head_size: int = 80,
                     page_size: int = 16, num_layers: int = 2, num_heads: int = 1, is_mla: bool = True,
                     dtype: torch.dtype = torch.float32, device="cpu", seed: int = 0, spare_blocks: int = 3,
                     spare_table_columns: int = 2, fill_new_tokens: bool = True,
                     poison: bool = True) -> PagedBatch:
    """A shuffled, poisoned paged cache holding random rows for positions `[0, N_b)` of every sequence.

    Blocks are handed out in a random order; slots past `N_b` and spare blocks hold NaN; lookup-table
    columns past a sequence's pages hold HUGE_BLOCK_ID. With `fill_new_tokens=False` the new tokens' slots
    `[L_b, N_b)` are NaN too (as before a cache write).
    """
    if len(cache_lengths) != len(new_lengths):
        raise ValueError(f"Invalid new_lengths: expected {len(cache_lengths)} values, got {len(new_lengths)}")
    gen = torch.Generator().manual_seed(seed)
    params = KVCacheParams(num_heads, head_size, is_mla, page_size, num_layers, dtype)
    totals = [c + n for c, n in zip(cache_lengths, new_lengths)]
    pages = [math.ceil(t / page_size) for t in totals]
    num_blocks = sum(pages) + spare_blocks
    order = torch.randperm(num_blocks, generator=gen).tolist()
    width = max(pages + [0]) + spare_table_columns
    table = torch.full((len(totals), max(width, 1)), HUGE_BLOCK_ID, dtype=torch.int32)
    blocks = torch.full(params.block_shape(num_blocks), float("nan") if poison else 0.0, dtype=torch.float32)
    next_block = 0
    for b, (n_pages, total) in enumerate(zip(pages, totals)):
        ids = order[next_block: next_block + n_pages]
        next_block += n_pages
        table[b, :n_pages] = torch.tensor(ids, dtype=torch.int32)
        filled = total if fill_new_tokens else cache_lengths[b]
        for pos in range(filled):
            blocks[ids[pos // page_size], :, :, pos % page_size] = torch.randn(
                params.kv_dim, num_layers, num_heads, head_size, generator=gen)
    kv = PagedKVCacheCollection(
        blocks.to(dtype).to(device), torch.tensor(list(cache_lengths), dtype=torch.int32, device=device),
        table.to(device), params, max_seq_length=max(new_lengths, default=0), max_cache_length=max(totals, default=0))
    return PagedBatch(kv, row_offsets(new_lengths, device=device), list(cache_lengths), list(new_lengths))


def random_mla_weights(*, kv_lora_rank: int, qk_rope_head_dim: int, qk_nope_head_dim: int, v_head_dim: int,
                       num_heads: int, hidden_size: int, dtype=torch.float32, device="cpu", seed: int = 0) -> dict:
    """Random DeepSeek-shaped MLA weights (nn.Linear orientation), scaled so activations stay O(1)."""
    gen = torch.Generator().manual_seed(seed)

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=gen) / math.sqrt(cols)).to(dtype).to(device)

    return {
        "kv_a_proj_with_mqa": w(kv_lora_rank + qk_rope_head_dim, hidden_size),
        "kv_a_layernorm": (1 + 0.1 * torch.randn(kv_lora_rank, generator=gen)).to(dtype).to(device),
        "kv_b_proj": w(num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank),
        "q_proj": w(num_heads * (qk_nope_head_dim + qk_rope_head_dim), hidden_size),
    }
