"""FLOP and byte counts of every pagedmla operation: the one place the benchmark's TFLOP/s, GB/s and roofline
fractions come from.

Conventions (shared with PERF.md so numbers compare across tables):
- a multiply-add is 2 FLOPs; softmax, scaling and rope are not counted;
- bytes are the compulsory DRAM traffic: every input read once and every output written once (cache rows once
  per sequence, however many heads or query tokens read them); metadata (offsets, lookup tables) is ignored
  except sparse indices, which are as large as a fraction of the rows they name;
- decode counts the keys each query token really sees (2 * N_visible * (head_size + kv_lora_rank) per token
  and head); causal prefill counts the `n * L + n * n / 2` area per sequence (n new tokens on L cached), which
  is `B * H * L * L * (192 + 128)` FLOPs for B prompts of L tokens, FlashAttention's and PERF.md's convention.

>>> decode_cost([1] * 16, [4095] * 16, num_heads=128).flops == 2 * 16 * 128 * 4096 * (576 + 512)
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "Cost",
    "cache_write_cost",
    "copy_cost",
    "decode_cost",
    "decompress_cost",
    "matmul_cost",
    "prefill_cost",
    "sdpa_cost",
    "sparse_decode_cost",
    "visible_keys",
]

_DECODE_MASKS = ("null", "causal", "sliding_window_causal", "sliding_window_noncausal", "chunked", "chunked_causal")


@dataclass(frozen=True)
class Cost:
    """Work of one call: `flops` (2 per multiply-add) and `bytes` of compulsory memory traffic."""

    flops: int
    bytes: int

    @property
    def intensity(self) -> float:
        """FLOP per byte (0 when no bytes move)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def roofline_seconds(self, copy_bytes_per_s: float, matmul_flops_per_s: float) -> float:
        """`max(bytes / copy_bw, flops / mm_rate)`: the least time the two measured ceilings allow."""
        return max(self.bytes / copy_bytes_per_s, self.flops / matmul_flops_per_s)

    def bound(self, copy_bytes_per_s: float, matmul_flops_per_s: float) -> str:
        """"memory" or "compute": which ceiling sets the roofline time."""
        return "memory" if self.bytes / copy_bytes_per_s >= self.flops / matmul_flops_per_s else "compute"


def _lengths(name: str, values: Sequence[int]) -> list[int]:
    out = [int(v) for v in values]
    if any(v < 0 for v in out):
        raise ValueError(f"Invalid {name}: expected non-negative lengths, got {out}")
    return out


def _pair(new_lengths, cache_lengths) -> tuple[list[int], list[int]]:
    new = _lengths("new_lengths", new_lengths)
    cached = _lengths("cache_lengths", cache_lengths)
    if len(new) != len(cached):
        raise ValueError(f"Invalid cache_lengths: expected {len(new)} values (one per sequence), got {len(cached)}")
    return new, cached


def _visible_one(q: int, num_keys: int, mask: str, window: int) -> int:
    """Keys visible to the query at absolute position q among positions [0, num_keys)."""
    if mask == "null":
        return num_keys
    if mask == "causal":
        return min(q + 1, num_keys)
    if mask == "sliding_window_causal":
        return max(0, min(q + 1, num_keys) - max(0, q - window + 1))
    if mask == "sliding_window_noncausal":
        return max(0, num_keys - max(0, q - window + 1))
    start = q // window * window
    if mask == "chunked":
        return max(0, min(num_keys, start + window) - start)
    return max(0, min(q + 1, num_keys) - start)


def visible_keys(new_lengths: Sequence[int], cache_lengths: Sequence[int], *, mask: str = "causal",
                 local_window_size: int = -1) -> int:
    """Sum over query tokens of the keys each one sees (query s of sequence b sits at `L_b + s`, `N_b` keys).

    >>> visible_keys([2], [10])  # causal: 11 + 12
    23
    """
    new, cached = _pair(new_lengths, cache_lengths)
    if mask not in _DECODE_MASKS:
        raise ValueError(f"Invalid mask: expected one of {list(_DECODE_MASKS)}, got {mask!r}")
    if mask not in ("null", "causal") and local_window_size <= 0:
        raise ValueError(f"Invalid local_window_size: expected an int > 0 for mask {mask!r}, got {local_window_size}")
    total = 0
    for n, length in zip(new, cached):
        if mask == "causal":
            # Closed form of sum_{s<n} (L + s + 1).
            total += n * length + n * (n + 1) // 2
        elif mask == "null":
            total += n * (n + length)
        else:
            total += sum(_visible_one(length + s, length + n, mask, local_window_size) for s in range(n))
    return total


def decode_cost(new_lengths: Sequence[int], cache_lengths: Sequence[int], *, num_heads: int, head_size: int = 576,
                kv_lora_rank: int = 512, mask: str = "causal", local_window_size: int = -1,
                cache_row_bytes: int | None = None, elem_bytes: int = 2) -> Cost:
    """Dense absorbed MLA decode (any query tokens per sequence: MTP / verification).

    FLOPs: `2 * H * (head_size + kv_lora_rank) * sum_tokens N_visible` (QK^T over head_size, PV over
    kv_lora_rank). Bytes: the `N_b` cache rows of every sequence once (`cache_row_bytes` each, default
    `head_size * elem_bytes`; 644 for the rope-aware FP8 row plus its scale), q `[T, H, head_size]` and
    out `[T, H, kv_lora_rank]` in `elem_bytes`.

    Args:
        new_lengths: query tokens n_b per sequence; cache_lengths: L_b (keys are `N_b = L_b + n_b`).
    """
    new, cached = _pair(new_lengths, cache_lengths)
    tokens = sum(new)
    seen = visible_keys(new, cached, mask=mask, local_window_size=local_window_size)
    row = head_size * elem_bytes if cache_row_bytes is None else cache_row_bytes
    flops = 2 * num_heads * (head_size + kv_lora_rank) * seen
    cache = sum(n + length for n, length in zip(new, cached) if n > 0) * row
    io = tokens * num_heads * (head_size + kv_lora_rank) * elem_bytes
    return Cost(flops, cache + io)


def sparse_decode_cost(tokens: int, *, num_heads: int, topk: int, head_size: int = 576, kv_lora_rank: int = 512,
                       cache_row_bytes: int | None = None, elem_bytes: int = 2, index_rows: int | None = None,
                       index_bytes: int = 4) -> Cost:
    """Sparse (top-k) MLA decode, DeepSeek-V3.2 style.

    FLOPs: `2 * T * H * topk * (head_size + kv_lora_rank)`. Bytes: the gathered rows
    (`index_rows * topk * cache_row_bytes`; `index_rows` defaults to T, pass B when every token of a sequence
    shares one index row), the indices themselves, q and out.
    """
    rows = tokens if index_rows is None else index_rows
    row = head_size * elem_bytes if cache_row_bytes is None else cache_row_bytes
    flops = 2 * tokens * num_heads * topk * (head_size + kv_lora_rank)
    gathered = rows * topk * (row + index_bytes)
    io = tokens * num_heads * (head_size + kv_lora_rank) * elem_bytes
    return Cost(flops, gathered + io)


def prefill_cost(new_lengths: Sequence[int], cache_lengths: Sequence[int], *, num_heads: int, qk_head_dim: int = 192,
                 v_head_dim: int = 128, qk_rope_head_dim: int = 64, causal: bool = True,
                 elem_bytes: int = 2) -> Cost:
    """Ragged MLA prefill attention over decompressed keys (`mla_prefill_kv_cache_ragged`).

    FLOPs: `2 * H * (qk_head_dim + v_head_dim) * pairs`, pairs = `n_b * L_b + n_b^2 / 2` per sequence when
    causal (the convention of the module docstring), `n_b * N_b` otherwise. Bytes: q `[T, H, qk]`, k
    `[N_b, H, qk - rope]` and v `[N_b, H, v]` per sequence, the rope columns of the `N_b` cache rows, out
    `[T, H, v]`.
    """
    new, cached = _pair(new_lengths, cache_lengths)
    per_pair = num_heads * (qk_head_dim + v_head_dim)
    if causal:
        # 2 * (n * L + n^2 / 2) keeps integers.
        flops = per_pair * sum(2 * n * length + n * n for n, length in zip(new, cached))
    else:
        flops = 2 * per_pair * sum(n * (n + length) for n, length in zip(new, cached))
    tokens = sum(new)
    keys = sum(n + length for n, length in zip(new, cached))
    nope = qk_head_dim - qk_rope_head_dim
    moved = (tokens * num_heads * (qk_head_dim + v_head_dim)
             + keys * num_heads * (nope + v_head_dim) + keys * qk_rope_head_dim)
    return Cost(flops, moved * elem_bytes)


def sdpa_cost(batch: int, seq_len: int, *, num_heads: int, qk_head_dim: int = 192, v_head_dim: int = 128,
              causal: bool = True, elem_bytes: int = 2) -> Cost:
    """Dense attention of `batch` prompts of `seq_len` tokens (the cuDNN baseline of prefill).

    FLOPs as `prefill_cost` with empty caches; bytes: q and k `[B, H, L, qk]`, v and out `[B, H, L, v]`.
    """
    flops = prefill_cost([seq_len] * batch, [0] * batch, num_heads=num_heads, qk_head_dim=qk_head_dim,
                         v_head_dim=v_head_dim, causal=causal).flops
    moved = batch * seq_len * num_heads * 2 * (qk_head_dim + v_head_dim)
    return Cost(flops, moved * elem_bytes)


def decompress_cost(rows: int, *, out_features: int, kv_lora_rank: int = 512, elem_bytes: int = 2) -> Cost:
    """`mla_decompress_k_cache_ragged_paged`: gather R latent rows, then `[R, rank] @ [rank, N]`.

    FLOPs: `2 * R * kv_lora_rank * N`. Bytes: the gathered latent columns read, the latent buffer written,
    the weight `[N, rank]` read and k_buffer `[R, N]` written.
    """
    flops = 2 * rows * kv_lora_rank * out_features
    moved = 2 * rows * kv_lora_rank + out_features * kv_lora_rank + rows * out_features
    return Cost(flops, moved * elem_bytes)


def cache_write_cost(tokens: int, *, in_features: int, out_features: int = 576, elem_bytes: int = 2) -> Cost:
    """`k_matmul_ragged_paged` (and `kv_matmul_ragged_paged` with `out_features = 2 * Hkv * D`).

    FLOPs: `2 * T * K_in * N`. Bytes: hidden `[T, K_in]` and weight `[N, K_in]` read, T cache rows of N written.
    """
    flops = 2 * tokens * in_features * out_features
    moved = tokens * in_features + out_features * in_features + tokens * out_features
    return Cost(flops, moved * elem_bytes)


def matmul_cost(m: int, n: int, k: int, *, elem_bytes: int = 2) -> Cost:
    """`[m, k] @ [k, n]`: `2 * m * n * k` FLOPs; A and B read, C written."""
    return Cost(2 * m * n * k, (m * k + k * n + m * n) * elem_bytes)


def copy_cost(num_bytes: int) -> Cost:
    """A device-to-device copy of `num_bytes`: no FLOPs, the bytes read plus the bytes written."""
    return Cost(0, 2 * num_bytes)
