"""The paged KV cache: parameters, the per-step view the operations take, and a page manager.

Layout (MAX): `blocks[num_blocks, kv_dim, num_layers, page_size, num_heads, head_size]`, `kv_dim = 1` for
MLA (K only; V is the first kv_lora_rank columns of K), 2 for MHA. Token `pos` of sequence `b` lives at
`blocks[lookup_table[b, pos // page_size], kv, layer, pos % page_size]`. See docs/layout.md.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from ._checks import FLOAT_DTYPES, FP8_DTYPES, check_int, check_tensor, values_checkable
from .reference.paged import quantize_rows

__all__ = [
    "KVCacheParams",
    "OutOfPagesError",
    "PagedKVCacheCollection",
    "PagedKVCacheManager",
    "quantize_kv_cache",
    "row_offsets",
]


@dataclass(frozen=True)
class KVCacheParams:
    """Static description of a paged cache.

    Args:
        num_heads: KV heads per token (1 for MLA).
        head_size: elements per head row (576 for DeepSeek MLA; 640 bytes for the rope-aware FP8 row).
        is_mla: MLA cache (K only) or MHA cache (K and V).
        page_size: tokens per page (any value >= 1).
        num_layers: layers stored in one block.
        dtype: element type of `blocks` (bf16, fp16, fp32 or float8_e4m3fn).
        quantization_granularity: FP8 only: elements per float32 scale G; element d uses scale `d // G`
            (head_size for one scale per token row; a G that does not divide head_size leaves a short last group).
        per_token_scale_rope_aware: FP8 only: rows are the rope-aware layout (e4m3 latent bytes scaled by the
            row's one scale, then the rope values as bf16 bytes); see docs/layout.md.
    """

    num_heads: int
    head_size: int
    is_mla: bool
    page_size: int
    num_layers: int
    dtype: torch.dtype = torch.bfloat16
    quantization_granularity: int | None = None
    per_token_scale_rope_aware: bool = False

    def __post_init__(self):
        check_int("num_heads", self.num_heads, min_value=1)
        check_int("head_size", self.head_size, min_value=1)
        check_int("page_size", self.page_size, min_value=1)
        check_int("num_layers", self.num_layers, min_value=1)
        for flag in ("is_mla", "per_token_scale_rope_aware"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"Invalid {flag}: expected a bool, got {type(getattr(self, flag)).__name__}")
        if self.is_mla and self.num_heads != 1:
            raise ValueError(f"Invalid num_heads: expected 1 for an MLA cache, got {self.num_heads}")
        if self.dtype not in FLOAT_DTYPES + FP8_DTYPES:
            raise ValueError(f"Invalid dtype: expected bfloat16, float16, float32 or float8_e4m3fn, got {self.dtype}")
        g = self.quantization_granularity
        if self.is_fp8:
            check_int("quantization_granularity", g, min_value=1, max_value=self.head_size)
        elif g is not None:
            raise ValueError(f"Invalid quantization_granularity: expected None for a {self.dtype} cache, got {g}")
        if self.per_token_scale_rope_aware and not (self.is_fp8 and g == self.head_size):
            raise ValueError("Invalid per_token_scale_rope_aware: expected an FP8 cache with one scale per row "
                             f"(quantization_granularity == head_size {self.head_size}), got dtype {self.dtype} and "
                             f"granularity {g}")

    @property
    def kv_dim(self) -> int:
        return 1 if self.is_mla else 2

    @property
    def is_fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def scales_per_row(self) -> int:
        """ceil(head_size / G): 576 with G = 128 has 5 groups, the last one holding the 64 rope values."""
        return -(-self.head_size // self.quantization_granularity) if self.is_fp8 else 0

    def block_shape(self, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks, self.kv_dim, self.num_layers, self.page_size, self.num_heads, self.head_size)

    def scales_shape(self, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks, self.kv_dim, self.num_layers, self.page_size, self.num_heads, self.scales_per_row)


def row_offsets(lengths: Sequence[int] | torch.Tensor, device=None) -> torch.Tensor:
    """Ragged offsets int32 [B+1] from per-sequence row counts: `[0, n_0, n_0+n_1, ...]`."""
    n = torch.as_tensor(lengths, dtype=torch.int64).reshape(-1)
    if n.numel() and int(n.min()) < 0:
        raise ValueError(f"Invalid lengths: expected values >= 0, got {int(n.min())}")
    out = torch.zeros(n.numel() + 1, dtype=torch.int32)
    out[1:] = torch.cumsum(n, 0).to(torch.int32)
    return out.to(device) if device is not None else out


class PagedKVCacheCollection:
    """The per-step view of a paged cache that every operation takes (MAX's `kv_collection`).

    Args:
        blocks: `[num_blocks, kv_dim, num_layers, page_size, num_heads, head_size]` of `params.dtype`.
        cache_lengths: int32 `[B]`, tokens cached before this step (`L_b`).
        lookup_table: int32 `[B, max_pages]`, physical block of each logical page.
        params: the cache's `KVCacheParams`.
        scales: FP8 caches only: float32 `[num_blocks, kv_dim, num_layers, page_size, num_heads, head_size // G]`.
        max_seq_length: max new tokens of a sequence this step (`max n_b`), if the caller knows it.
        max_cache_length: max keys of a sequence this step (`max N_b`), if the caller knows it.

    >>> p = KVCacheParams(num_heads=1, head_size=80, is_mla=True, page_size=16, num_layers=1, dtype=torch.float32)
    >>> blocks = torch.zeros(p.block_shape(4))
    >>> kv = PagedKVCacheCollection(blocks, torch.tensor([0], dtype=torch.int32),
    ...                             torch.tensor([[2, 0]], dtype=torch.int32), p)
    >>> tuple(kv.key_cache(0).shape)
    (4, 16, 1, 80)
    """

    def __init__(self, blocks: torch.Tensor, cache_lengths: torch.Tensor, lookup_table: torch.Tensor,
                 params: KVCacheParams, scales: torch.Tensor | None = None, *,
                 max_seq_length: int | None = None, max_cache_length: int | None = None):
        if not isinstance(params, KVCacheParams):
            raise ValueError(f"Invalid type of params: expected KVCacheParams, got {type(params).__name__}")
        check_tensor("blocks", blocks, ndim=6)
        check_tensor("blocks", blocks, shape=params.block_shape(blocks.shape[0]) if blocks.dim() == 6 else (None,) * 6,
                     dtype=params.dtype)
        if blocks.stride(-1) != 1:
            raise ValueError(f"Invalid layout of blocks: expected a unit stride in head_size, got strides {blocks.stride()}")
        device = blocks.device
        check_tensor("cache_lengths", cache_lengths, ndim=1, dtype=torch.int32, device=device,
                     contiguous_last_dim=True)
        batch = cache_lengths.shape[0]
        check_tensor("lookup_table", lookup_table, shape=(batch, None), dtype=torch.int32, device=device,
                     contiguous_last_dim=True)
        if params.is_fp8:
            if scales is None:
                raise ValueError("Invalid scales: expected a float32 tensor for an FP8 cache, got None")
            check_tensor("scales", scales, shape=params.scales_shape(blocks.shape[0]), dtype=torch.float32,
                         device=device, contiguous_last_dim=True)
        elif scales is not None:
            raise ValueError(f"Invalid scales: expected None for a {params.dtype} cache, got a tensor")
        for name, v in (("max_seq_length", max_seq_length), ("max_cache_length", max_cache_length)):
            if v is not None:
                check_int(name, v, min_value=0)
        if values_checkable(cache_lengths, lookup_table) and batch and int(cache_lengths.min()) < 0:
            raise ValueError(f"Invalid cache_lengths: expected values >= 0, got min {int(cache_lengths.min())}")
        self.blocks = blocks
        self.cache_lengths = cache_lengths
        self.lookup_table = lookup_table
        self.params = params
        self.scales = scales
        self.max_seq_length = max_seq_length
        self.max_cache_length = max_cache_length

    @property
    def batch_size(self) -> int:
        return self.cache_lengths.shape[0]

    @property
    def num_blocks(self) -> int:
        return self.blocks.shape[0]

    @property
    def page_size(self) -> int:
        return self.params.page_size

    @property
    def device(self) -> torch.device:
        return self.blocks.device

    def check_layer(self, layer_idx, name: str = "layer_idx") -> int:
        return check_int(name, layer_idx, min_value=0, max_value=self.params.num_layers - 1)

    def key_cache(self, layer: int) -> torch.Tensor:
        """K rows of one layer as a strided view `[num_blocks, page_size, num_heads, head_size]`."""
        return self.blocks[:, 0, self.check_layer(layer)]

    def value_cache(self, layer: int) -> torch.Tensor:
        """V rows of one layer (MHA caches only; an MLA cache's V is the first kv_lora_rank columns of K)."""
        if self.params.is_mla:
            raise ValueError("Invalid call value_cache on an MLA cache: expected an MHA cache (kv_dim 2), got is_mla=True")
        return self.blocks[:, 1, self.check_layer(layer)]

    def key_scales(self, layer: int) -> torch.Tensor | None:
        """FP8 scales of K rows of one layer `[num_blocks, page_size, num_heads, head_size // G]`, else None."""
        return None if self.scales is None else self.scales[:, 0, self.check_layer(layer)]

    def replace(self, **changes) -> PagedKVCacheCollection:
        """A copy with some fields replaced (e.g. new cache_lengths for the next step)."""
        kw = dict(blocks=self.blocks, cache_lengths=self.cache_lengths, lookup_table=self.lookup_table,
                  params=self.params, scales=self.scales, max_seq_length=self.max_seq_length,
                  max_cache_length=self.max_cache_length)
        kw.update(changes)
        return PagedKVCacheCollection(**kw)


class OutOfPagesError(RuntimeError):
    """The page pool cannot hold what was asked; the manager's state is unchanged."""


class PagedKVCacheManager:
    """Owns the blocks of a paged cache, a free list and each request's pages.

    Pages are reference counted so several requests can read the same physical pages (a shared prompt
    prefix): `claim(new, share_prefix_from=old, num_shared_tokens=n)` maps the first `n // page_size` full
    pages of `old` into `new`. New tokens are always written past the shared full pages, so a shared page is
    never written through a second request.

    >>> p = KVCacheParams(num_heads=1, head_size=80, is_mla=True, page_size=4, num_layers=1, dtype=torch.float32)
    >>> m = PagedKVCacheManager(p, num_blocks=8)
    >>> m.claim("a")
    >>> kv = m.step(["a"], [6])
    >>> kv.lookup_table.shape[1], m.num_free_blocks
    (2, 6)
    >>> m.commit(["a"], [6]); m.length("a")
    6
    """

    def __init__(self, params: KVCacheParams, num_blocks: int, *, device=None,
                 max_pages_per_request: int | None = None):
        if not isinstance(params, KVCacheParams):
            raise ValueError(f"Invalid type of params: expected KVCacheParams, got {type(params).__name__}")
        check_int("num_blocks", num_blocks, min_value=1)
        if max_pages_per_request is not None:
            check_int("max_pages_per_request", max_pages_per_request, min_value=1)
        # A fixed lookup-table width keeps step tensors the same shape, as a replayed CUDA graph needs.
        self.max_pages_per_request = max_pages_per_request
        self.params = params
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.blocks = torch.zeros(params.block_shape(num_blocks), dtype=params.dtype, device=self.device)
        self.scales = (torch.ones(params.scales_shape(num_blocks), dtype=torch.float32, device=self.device)
                       if params.is_fp8 else None)
        # Pop from the end: low block ids are handed out first.
        self._free = list(range(num_blocks - 1, -1, -1))
        self._refs = [0] * num_blocks
        self._pages: dict[Hashable, list[int]] = {}
        self._lengths: dict[Hashable, int] = {}

    @property
    def num_blocks(self) -> int:
        return self.blocks.shape[0]

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    def _known(self, request_id) -> None:
        if request_id not in self._pages:
            raise ValueError(f"Invalid request_id: expected a claimed request, got {request_id!r}")

    def length(self, request_id) -> int:
        """Tokens committed to the cache for this request."""
        self._known(request_id)
        return self._lengths[request_id]

    def pages(self, request_id) -> list[int]:
        """Physical blocks of this request, in logical order."""
        self._known(request_id)
        return list(self._pages[request_id])

    def claim(self, request_id, *, share_prefix_from=None, num_shared_tokens: int = 0) -> int:
        """Register a request; optionally share the full pages of another request's first tokens.

        Returns the number of tokens shared (a multiple of page_size, at most `num_shared_tokens`).
        """
        if request_id in self._pages:
            raise ValueError(f"Invalid request_id: expected a new request, got {request_id!r} (already claimed)")
        shared: list[int] = []
        if share_prefix_from is not None:
            if share_prefix_from not in self._pages:
                raise ValueError(f"Invalid share_prefix_from: expected a claimed request, got {share_prefix_from!r}")
            limit = min(check_int("num_shared_tokens", num_shared_tokens, min_value=0),
                        self._lengths[share_prefix_from])
            shared = self._pages[share_prefix_from][: limit // self.params.page_size]
            for blk in shared:
                self._refs[blk] += 1
        self._pages[request_id] = list(shared)
        self._lengths[request_id] = len(shared) * self.params.page_size
        return self._lengths[request_id]

    def _pages_needed(self, request_id, num_new_tokens: int) -> int:
        total = self._lengths[request_id] + num_new_tokens
        return max(0, math.ceil(total / self.params.page_size) - len(self._pages[request_id]))

    def reserve(self, request_id, num_new_tokens: int) -> None:
        """Make room for `num_new_tokens` more tokens; OutOfPagesError (state unchanged) if the pool is short."""
        self._reserve_all([request_id], [num_new_tokens])

    def _reserve_all(self, request_ids, counts) -> None:
        for rid in request_ids:
            self._known(rid)
        need = [self._pages_needed(r, check_int("num_new_tokens", n, min_value=0)) for r, n in zip(request_ids, counts)]
        cap = self.max_pages_per_request
        for rid, n, k in zip(request_ids, counts, need):
            if cap is not None and len(self._pages[rid]) + k > cap:
                raise ValueError(f"Invalid num_new_tokens for {rid!r}: expected at most "
                                 f"{cap * self.params.page_size - self._lengths[rid]} more tokens "
                                 f"(max_pages_per_request={cap}), got {n}")
        if sum(need) > len(self._free):
            raise OutOfPagesError(f"Out of cache pages: the step needs {sum(need)} new pages of "
                                  f"{self.params.page_size} tokens, {len(self._free)} are free")
        for rid, k in zip(request_ids, need):
            for _ in range(k):
                blk = self._free.pop()
                self._refs[blk] = 1
                self._pages[rid].append(blk)

    def step(self, request_ids: Sequence, num_new_tokens: Sequence[int]) -> PagedKVCacheCollection:
        """Reserve room for this step's new tokens and return the collection the ops take."""
        if len(request_ids) != len(num_new_tokens):
            raise ValueError(f"Invalid num_new_tokens: expected {len(request_ids)} counts (one per request), "
                             f"got {len(num_new_tokens)}")
        if len(set(request_ids)) != len(request_ids):
            raise ValueError(f"Invalid request_ids: expected distinct requests, got {list(request_ids)!r}")
        self._reserve_all(request_ids, num_new_tokens)
        lens = [self._lengths[r] for r in request_ids]
        max_pages = self.max_pages_per_request or max([len(self._pages[r]) for r in request_ids] + [1])
        table = torch.zeros(len(request_ids), max_pages, dtype=torch.int32)
        for i, r in enumerate(request_ids):
            table[i, : len(self._pages[r])] = torch.tensor(self._pages[r], dtype=torch.int32)
        totals = [length + n for length, n in zip(lens, num_new_tokens)]
        return PagedKVCacheCollection(
            self.blocks, torch.tensor(lens, dtype=torch.int32, device=self.device), table.to(self.device),
            self.params, self.scales, max_seq_length=max(num_new_tokens, default=0),
            max_cache_length=max(totals, default=0))

    def commit(self, request_ids: Sequence, num_new_tokens: Sequence[int]) -> None:
        """Advance lengths after a step has written its tokens (all or nothing)."""
        if len(request_ids) != len(num_new_tokens):
            raise ValueError(f"Invalid num_new_tokens: expected {len(request_ids)} counts (one per request), "
                             f"got {len(num_new_tokens)}")
        if len(set(request_ids)) != len(request_ids):
            raise ValueError(f"Invalid request_ids: expected distinct requests, got {list(request_ids)!r}")
        for r, n in zip(request_ids, num_new_tokens):
            self._known(r)
            check_int("num_new_tokens", n, min_value=0)
            if self._lengths[r] + n > len(self._pages[r]) * self.params.page_size:
                raise ValueError(f"Invalid num_new_tokens for {r!r}: expected at most "
                                 f"{len(self._pages[r]) * self.params.page_size - self._lengths[r]} (reserved), got {n}")
        for r, n in zip(request_ids, num_new_tokens):
            self._lengths[r] += n

    def release(self, request_id) -> None:
        """Forget a request; its pages return to the pool once no other request reads them."""
        self._known(request_id)
        for blk in self._pages.pop(request_id):
            self._refs[blk] -= 1
            if self._refs[blk] == 0:
                self._free.append(blk)
        del self._lengths[request_id]


def quantize_kv_cache(kv_collection: PagedKVCacheCollection, quantization_granularity: int | None = None, *,
                      rope_aware: bool = False, qk_rope_head_dim: int = 64) -> PagedKVCacheCollection:
    """An FP8 e4m3 copy of a bf16/fp16/fp32 MLA cache, with float32 scales (amax / 448 per group).

    Plain layout: one scale per `quantization_granularity` elements of a row. Rope-aware layout
    (`rope_aware=True`, FlashMLA-style 640-byte row for DeepSeek): the latent part as e4m3 with one scale per
    row, then the last `qk_rope_head_dim` values as bf16 bytes; `head_size` becomes `latent + 2 * R` bytes.
    """
    if not isinstance(kv_collection, PagedKVCacheCollection):
        raise ValueError(f"Invalid type of kv_collection: expected PagedKVCacheCollection, got "
                         f"{type(kv_collection).__name__}")
    src = kv_collection.params
    if src.is_fp8:
        raise ValueError("Invalid kv_collection: expected a bf16/fp16/fp32 cache to quantize, got an FP8 cache")
    if rope_aware:
        check_int("qk_rope_head_dim", qk_rope_head_dim, min_value=1, max_value=src.head_size - 1)
        head_size = src.head_size + qk_rope_head_dim
        granularity = head_size
    else:
        granularity = check_int("quantization_granularity", quantization_granularity, min_value=1)
        head_size = src.head_size
    params = KVCacheParams(src.num_heads, head_size, src.is_mla, src.page_size, src.num_layers,
                           torch.float8_e4m3fn, granularity, per_token_scale_rope_aware=rope_aware)
    rows, scales = quantize_rows(kv_collection.blocks, granularity, rope_aware=rope_aware,
                                 qk_rope_head_dim=qk_rope_head_dim)
    return PagedKVCacheCollection(rows.contiguous(), kv_collection.cache_lengths, kv_collection.lookup_table,
                                  params, scales.contiguous(), max_seq_length=kv_collection.max_seq_length,
                                  max_cache_length=kv_collection.max_cache_length)
