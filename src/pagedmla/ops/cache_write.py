"""Writing the cache: K (MLA) and K/V (MHA) projections stored into pages, RMS norm and rope in place."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import FLOAT_DTYPES, check_float, check_int, check_tensor, values_checkable
from . import _dispatch
from ._common import check_collection, check_offsets_for, library_op, max_seq_length

_REF = "pagedmla.reference.cache_write"
for _name in ("k_matmul_ragged_paged", "kv_matmul_ragged_paged", "rms_norm_key_cache", "fused_qk_rope_ragged"):
    _dispatch.REFERENCE_IMPLS[_name] = f"{_REF}:{_name}"
    _dispatch.TRITON_LAUNCHERS[_name] = f"pagedmla.ops._triton_cache_write:{_name}"


@library_op("k_matmul_ragged_paged", mutates_args=("blocks",))
def _k_matmul_op(hidden_state: Tensor, input_row_offsets: Tensor, weight: Tensor, blocks: Tensor,
                 cache_lengths: Tensor, lookup_table: Tensor, layer_idx: int, backend: str) -> None:
    _dispatch.impl("k_matmul_ragged_paged", backend)(hidden_state, input_row_offsets, weight, blocks,
                                                      cache_lengths, lookup_table, layer_idx)


@library_op("kv_matmul_ragged_paged", mutates_args=("blocks",))
def _kv_matmul_op(hidden_state: Tensor, input_row_offsets: Tensor, weight: Tensor, blocks: Tensor,
                  cache_lengths: Tensor, lookup_table: Tensor, layer_idx: int, backend: str) -> None:
    _dispatch.impl("kv_matmul_ragged_paged", backend)(hidden_state, input_row_offsets, weight, blocks,
                                                       cache_lengths, lookup_table, layer_idx)


@library_op("rms_norm_key_cache", mutates_args=("blocks",))
def _rms_norm_op(blocks: Tensor, cache_lengths: Tensor, lookup_table: Tensor, gamma: Tensor,
                 input_row_offsets: Tensor, layer_idx: int, eps: float, max_seq_length: int, backend: str) -> None:
    _dispatch.impl("rms_norm_key_cache", backend)(blocks, cache_lengths, lookup_table, gamma, input_row_offsets,
                                                   layer_idx, eps, max_seq_length)


@library_op("fused_qk_rope_ragged", mutates_args=("blocks", "q_out"))
def _rope_op(q_rope: Tensor, input_row_offsets: Tensor, blocks: Tensor, cache_lengths: Tensor,
             lookup_table: Tensor, freqs_cis: Tensor, layer_idx: int, interleaved: bool, q_out: Tensor,
             backend: str) -> None:
    _dispatch.impl("fused_qk_rope_ragged", backend)(q_rope, input_row_offsets, blocks, cache_lengths,
                                                     lookup_table, freqs_cis, layer_idx, interleaved, q_out)


for _op in (_k_matmul_op, _kv_matmul_op, _rms_norm_op, _rope_op):
    _op.register_fake(lambda *args, **kwargs: None)


def _check_projection(hidden_state, input_row_offsets, weight, kv, layer_idx, out_features: int):
    check_tensor("hidden_state", hidden_state, ndim=2, dtype=FLOAT_DTYPES, device=kv.device, contiguous_last_dim=True)
    check_tensor("weight", weight, shape=(out_features, hidden_state.shape[1]), dtype=hidden_state.dtype,
                 device=kv.device, contiguous_last_dim=True)
    check_offsets_for(kv, input_row_offsets, hidden_state.shape[0])


def k_matmul_ragged_paged(hidden_state: Tensor, input_row_offsets: Tensor, weight: Tensor, kv_collection,
                          layer_idx: int, *, backend: str = "auto") -> None:
    """Store `hidden_state @ weight.T` (MLA's `kv_a_proj_with_mqa`) as the cache rows of the new tokens.

    Row g (token t of sequence b) lands at absolute position `L_b + t`; float32 accumulation.

    Args:
        hidden_state: `[T, K_in]` bf16/fp16/fp32.
        input_row_offsets: int32 `[B+1]`, rows of each sequence.
        weight: `[head_size, K_in]` (nn.Linear orientation), same dtype as hidden_state.
        kv_collection: an MLA `PagedKVCacheCollection` (not FP8).
        layer_idx: layer to write.
        backend: "auto" | "reference" | "triton".

    >>> # see README: k_matmul_ragged_paged(x, offsets, w_kv_a, kv, 0)
    """
    kv = check_collection(kv_collection, layer_idx, mla=True, writable=True)
    _check_projection(hidden_state, input_row_offsets, weight, kv, layer_idx, kv.params.head_size)
    chosen = _dispatch.resolve("k_matmul_ragged_paged", backend, kv.device)
    torch.ops.pagedmla.k_matmul_ragged_paged(hidden_state, input_row_offsets, weight, kv.blocks, kv.cache_lengths,
                                             kv.lookup_table, layer_idx, chosen)


def kv_matmul_ragged_paged(hidden_state: Tensor, input_row_offsets: Tensor, weight: Tensor, kv_collection,
                           layer_idx: int, *, backend: str = "auto") -> None:
    """Store `hidden_state @ weight.T` into an MHA cache: columns `[0, Hkv*D)` to K, the rest to V.

    Args:
        hidden_state: `[T, K_in]`; weight: `[2 * num_heads * head_size, K_in]`; kv_collection: an MHA cache.
    """
    kv = check_collection(kv_collection, layer_idx, mla=False, writable=True)
    p = kv.params
    _check_projection(hidden_state, input_row_offsets, weight, kv, layer_idx, 2 * p.num_heads * p.head_size)
    chosen = _dispatch.resolve("kv_matmul_ragged_paged", backend, kv.device)
    torch.ops.pagedmla.kv_matmul_ragged_paged(hidden_state, input_row_offsets, weight, kv.blocks,
                                              kv.cache_lengths, kv.lookup_table, layer_idx, chosen)


def rms_norm_key_cache(kv_collection, gamma: Tensor, eps: float, layer_idx: int, input_row_offsets: Tensor,
                       rms_norm_cols: int = 512, *, backend: str = "auto") -> None:
    """In place: RMS-normalize columns `[0, rms_norm_cols)` of the new tokens' cache rows.

    `x <- x * rsqrt(mean(x^2) + eps) * gamma` in float32, stored in the cache dtype.

    Args:
        gamma: `[rms_norm_cols]` (`kv_a_layernorm.weight`); eps: the norm's epsilon.
    """
    kv = check_collection(kv_collection, layer_idx, mla=True, writable=True)
    check_int("rms_norm_cols", rms_norm_cols, min_value=1, max_value=kv.params.head_size)
    check_tensor("gamma", gamma, shape=(rms_norm_cols,), dtype=FLOAT_DTYPES, device=kv.device, contiguous_last_dim=True)
    eps = check_float("eps", eps)
    if not eps >= 0:
        raise ValueError(f"Invalid eps: expected >= 0, got {eps}")
    check_offsets_for(kv, input_row_offsets, None)
    chosen = _dispatch.resolve("rms_norm_key_cache", backend, kv.device)
    torch.ops.pagedmla.rms_norm_key_cache(kv.blocks, kv.cache_lengths, kv.lookup_table, gamma, input_row_offsets,
                                          layer_idx, eps, max_seq_length(kv, input_row_offsets), chosen)


def fused_qk_rope_ragged(q_rope: Tensor, input_row_offsets: Tensor, kv_collection, freqs_cis: Tensor,
                         layer_idx: int, interleaved: bool = True, *, output: Tensor | None = None,
                         backend: str = "auto") -> Tensor:
    """Rope `q_rope` (returned) and, in place, the last R columns of the new tokens' cache rows, at `L_b + t`.

    Pair i of a row rotates by `cos = freqs_cis[pos, 2i]`, `sin = freqs_cis[pos, 2i+1]`; interleaved pairs
    are `(x[2i], x[2i+1])`, otherwise `(x[i], x[i + R/2])`. Latent columns are never touched.

    Args:
        q_rope: `[T, H, R]`; freqs_cis: `[max_pos, R]` float; output: optional `[T, H, R]` in q_rope's dtype.
    Returns:
        The roped q `[T, H, R]`.
    """
    kv = check_collection(kv_collection, layer_idx, mla=True, writable=True)
    check_tensor("q_rope", q_rope, ndim=3, dtype=FLOAT_DTYPES, device=kv.device)
    rope_dim = q_rope.shape[-1]
    if rope_dim % 2 or rope_dim > kv.params.head_size:
        raise ValueError(f"Invalid shape of q_rope: expected an even last dimension <= head_size "
                         f"{kv.params.head_size}, got {tuple(q_rope.shape)}")
    check_tensor("freqs_cis", freqs_cis, shape=(None, rope_dim), dtype=FLOAT_DTYPES, device=kv.device)
    if not isinstance(interleaved, bool):
        raise ValueError(f"Invalid interleaved: expected a bool, got {type(interleaved).__name__}")
    check_offsets_for(kv, input_row_offsets, q_rope.shape[0])
    if values_checkable(input_row_offsets, kv.cache_lengths) and q_rope.shape[0]:
        counts = (input_row_offsets[1:] - input_row_offsets[:-1]).long()
        last = int((kv.cache_lengths.long() + counts - 1)[counts > 0].max())
        if last >= freqs_cis.shape[0]:
            raise ValueError(f"Invalid shape of freqs_cis: expected at least {last + 1} positions, "
                             f"got {freqs_cis.shape[0]}")
    if output is None:
        output = torch.empty_like(q_rope)
    else:
        check_tensor("output", output, shape=tuple(q_rope.shape), dtype=q_rope.dtype, device=kv.device)
    chosen = _dispatch.resolve("fused_qk_rope_ragged", backend, kv.device)
    torch.ops.pagedmla.fused_qk_rope_ragged(q_rope, input_row_offsets, kv.blocks, kv.cache_lengths,
                                            kv.lookup_table, freqs_cis, layer_idx, interleaved, output, chosen)
    return output
