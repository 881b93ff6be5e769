"""Prefill: the chunk plan, latent-cache decompression, ragged MLA prefill attention and the chunked driver."""

from __future__ import annotations

import torch
from torch import Tensor

from .._checks import FLOAT_DTYPES, check_float, check_int, check_row_offsets, check_tensor, values_checkable
from ..masks import mask_code
from ..reference.attention import merge_states
from . import _dispatch
from ._common import check_bool, check_chunk_sources, check_collection, check_offsets_for, library_op

_REF = "pagedmla.reference.prefill"
for _name in ("mla_prefill_plan", "mla_decompress_k_cache_ragged_paged", "mla_prefill_kv_cache_ragged"):
    _dispatch.REFERENCE_IMPLS[_name] = f"{_REF}:{_name}"
    _dispatch.TRITON_LAUNCHERS[_name] = f"pagedmla.ops._triton_prefill:{_name}"


@library_op("mla_prefill_plan", mutates_args=())
def _plan_op(input_row_offsets: Tensor, cache_lengths: Tensor, page_size: int, buffer_size: int, max_chunks: int,
             backend: str) -> tuple[Tensor, Tensor, Tensor]:
    return _dispatch.impl("mla_prefill_plan", backend)(input_row_offsets, cache_lengths, page_size, buffer_size,
                                                        max_chunks)


@_plan_op.register_fake
def _plan_fake(input_row_offsets, cache_lengths, page_size, buffer_size, max_chunks, backend):
    batch = cache_lengths.shape[0]
    new = input_row_offsets.new_empty
    return new((max_chunks, batch + 1)), new((max_chunks, batch)), new((max_chunks,))


@library_op("mla_decompress_k_cache_ragged_paged", mutates_args=("k_latent_buffer", "k_buffer"))
def _decompress_op(buffer_row_offsets: Tensor, cache_offsets: Tensor, buffer_length: int, weight: Tensor,
                   blocks: Tensor, cache_lengths: Tensor, lookup_table: Tensor, scales: Tensor | None,
                   quant_granularity: int, layer_idx: int, k_latent_buffer: Tensor, k_buffer: Tensor,
                   backend: str) -> None:
    _dispatch.impl("mla_decompress_k_cache_ragged_paged", backend)(
        buffer_row_offsets, cache_offsets, buffer_length, weight, blocks, cache_lengths, lookup_table, scales,
        quant_granularity, layer_idx, k_latent_buffer, k_buffer)


@library_op("mla_prefill_kv_cache_ragged", mutates_args=("out", "lse"))
def _prefill_op(q: Tensor, k: Tensor, v: Tensor, buffer_row_offsets: Tensor, cache_offsets: Tensor,
                input_row_offsets: Tensor, blocks: Tensor, cache_lengths: Tensor, lookup_table: Tensor,
                scales: Tensor | None, quant_granularity: int, layer_idx: int, scale: float, mask_code: int,
                window: int, out: Tensor, lse: Tensor, backend: str) -> None:
    _dispatch.impl("mla_prefill_kv_cache_ragged", backend)(
        q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, blocks, cache_lengths, lookup_table,
        scales, quant_granularity, layer_idx, scale, mask_code, window, out, lse)


for _op in (_decompress_op, _prefill_op):
    _op.register_fake(lambda *args, **kwargs: None)


def mla_prefill_plan(input_row_offsets: Tensor, kv_collection, buffer_size: int, max_chunks: int = 16, *,
                     backend: str = "auto") -> tuple[Tensor, Tensor, Tensor]:
    """Plan the decompression chunks of a prefill step.

    The sequences' page-aligned totals `align_up(N_b, page_size)` are laid end to end and cut into chunks of
    `buffer_size` rows. In chunk c, sequence b occupies buffer rows `[bro[c, b], bro[c, b+1])` holding cache
    positions `co[c, b], co[c, b] + 1, ...`.

    Returns:
        buffer_row_offsets int32 `[max_chunks, B+1]`, cache_offsets int32 `[max_chunks, B]`,
        buffer_lengths int32 `[max_chunks]` (-1 for unused chunks).

    >>> # page 128, buffer 256, prompts 160 and 200: bro[0]=[0,256,256], bro[1]=[0,0,256], co[1]=[256,0]
    """
    kv = check_collection(kv_collection, 0, mla=None)
    check_int("buffer_size", buffer_size, min_value=1)
    check_int("max_chunks", max_chunks, min_value=1)
    check_offsets_for(kv, input_row_offsets, None)
    _check_chunk_count(input_row_offsets, kv, buffer_size, max_chunks)
    chosen = _dispatch.resolve("mla_prefill_plan", backend, kv.device)
    return torch.ops.pagedmla.mla_prefill_plan(input_row_offsets, kv.cache_lengths, kv.page_size, buffer_size,
                                               max_chunks, chosen)


def _check_chunk_count(input_row_offsets: Tensor, kv, buffer_size: int, max_chunks: int) -> None:
    """A batch needing more than max_chunks chunks is a ValueError. It reads the lengths (one sync per step on a
    GPU), skipped only while tracing or capturing a CUDA graph, where the kernels cannot raise."""
    if torch.compiler.is_compiling() or (kv.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        return
    counts = (input_row_offsets[1:] - input_row_offsets[:-1]).long()
    aligned = (kv.cache_lengths.long() + counts + kv.page_size - 1) // kv.page_size * kv.page_size
    line = int(aligned.sum())
    needed = -(-line // buffer_size)
    if needed > max_chunks:
        raise ValueError(f"Invalid buffer_size: the batch needs {needed} chunks of {buffer_size} rows "
                         f"({line} page-aligned cache rows), expected at most max_chunks={max_chunks}")


def _as_int(name: str, value) -> int:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"Invalid shape of {name}: expected a scalar, got {tuple(value.shape)}")
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise ValueError(f"Invalid dtype of {name}: expected an integer scalar, got {value.dtype}")
        value = int(value.item())
    return check_int(name, value, min_value=-1)


def mla_decompress_k_cache_ragged_paged(buffer_row_offsets_1d: Tensor, cache_offsets_1d: Tensor, buffer_length,
                                        weight: Tensor, kv_collection, layer_idx: int, k_latent_buffer: Tensor,
                                        k_buffer: Tensor, *, backend: str = "auto") -> None:
    """Gather one chunk's latent cache rows and up-project them: `k_buffer = k_latent_buffer @ weight.T`.

    Row r < buffer_length of sequence b (`bro[b] <= r < bro[b+1]`) holds cache position `r - bro[b] + co[b]`,
    columns `[0, kv_lora_rank)` (FP8 caches dequantize while gathering). Rows past buffer_length are untouched.

    Args:
        buffer_row_offsets_1d: int32 `[B+1]` (one row of the plan); cache_offsets_1d: int32 `[B]`.
        buffer_length: int (or a scalar tensor), rows to fill; -1 or 0 fills nothing.
        weight: `[N, kv_lora_rank]`, DeepSeek's `kv_b_proj.weight` (per head 128 K-nope then 128 V columns).
        k_latent_buffer: `[BUF, kv_lora_rank]`; k_buffer: `[BUF, N]`, both in weight's dtype.
    """
    kv = check_collection(kv_collection, layer_idx, mla=True)
    batch = check_row_offsets("buffer_row_offsets_1d", buffer_row_offsets_1d, batch_size=kv.batch_size,
                              total_rows=None, device=kv.device)
    check_tensor("cache_offsets_1d", cache_offsets_1d, shape=(batch,), dtype=torch.int32, device=kv.device,
                 contiguous_last_dim=True)
    check_tensor("weight", weight, ndim=2, dtype=FLOAT_DTYPES, device=kv.device, contiguous_last_dim=True)
    rank = weight.shape[1]
    if rank > kv.params.head_size:
        raise ValueError(f"Invalid shape of weight: expected kv_lora_rank (dim 1) <= head_size "
                         f"{kv.params.head_size}, got {tuple(weight.shape)}")
    check_tensor("k_latent_buffer", k_latent_buffer, shape=(None, rank), dtype=weight.dtype, device=kv.device,
                 contiguous_last_dim=True)
    check_tensor("k_buffer", k_buffer, shape=(k_latent_buffer.shape[0], weight.shape[0]), dtype=weight.dtype,
                 device=kv.device, contiguous_last_dim=True)
    length = _as_int("buffer_length", buffer_length)
    if length > k_latent_buffer.shape[0]:
        raise ValueError(f"Invalid buffer_length: expected at most {k_latent_buffer.shape[0]} (buffer rows), "
                         f"got {length}")
    if values_checkable(buffer_row_offsets_1d) and batch and length > int(buffer_row_offsets_1d[-1]):
        raise ValueError(f"Invalid buffer_length: expected at most {int(buffer_row_offsets_1d[-1])} "
                         f"(buffer_row_offsets_1d[-1]), got {length}")
    if values_checkable(cache_offsets_1d) and batch and int(cache_offsets_1d.min()) < 0:
        raise ValueError(f"Invalid cache_offsets_1d: expected values >= 0, got {int(cache_offsets_1d.min())}")
    if values_checkable(buffer_row_offsets_1d, cache_offsets_1d, kv.cache_lengths, kv.lookup_table) and batch:
        rows = (buffer_row_offsets_1d[1:] - buffer_row_offsets_1d[:-1]).long()
        pages = kv.lookup_table.long()
        end = cache_offsets_1d.long() + rows
        for b in (rows > 0).nonzero().view(-1).tolist():
            last_page = (int(end[b]) - 1) // kv.page_size
            ids = pages[b, int(cache_offsets_1d[b]) // kv.page_size: last_page + 1]
            if last_page >= pages.shape[1] or int(ids.min()) < 0 or int(ids.max()) >= kv.num_blocks:
                raise ValueError(f"Invalid cache_offsets_1d: sequence {b} reads cache positions "
                                 f"{int(cache_offsets_1d[b])}..{int(end[b]) - 1}, expected pages with valid block "
                                 f"ids in kv_collection.lookup_table")
    chosen = _dispatch.resolve("mla_decompress_k_cache_ragged_paged", backend, kv.device)
    torch.ops.pagedmla.mla_decompress_k_cache_ragged_paged(
        buffer_row_offsets_1d, cache_offsets_1d, length, weight, kv.blocks, kv.cache_lengths, kv.lookup_table,
        kv.scales, kv.params.quantization_granularity or 0, layer_idx, k_latent_buffer, k_buffer, chosen)


def _check_prefill_qkv(q, k, v, kv):
    if kv.params.per_token_scale_rope_aware:
        raise ValueError("Invalid kv_collection: expected a cache with plain rows for prefill, got the rope-aware "
                         "FP8 row (a decode-only layout; see docs/layout.md)")
    check_tensor("q", q, ndim=3, dtype=FLOAT_DTYPES, device=kv.device, contiguous_last_dim=True)
    check_tensor("k", k, shape=(None, q.shape[1], None), dtype=q.dtype, device=kv.device, contiguous_last_dim=True)
    check_tensor("v", v, shape=(k.shape[0], q.shape[1], None), dtype=q.dtype, device=kv.device,
                 contiguous_last_dim=True)
    rope_dim = q.shape[-1] - k.shape[-1]
    if rope_dim < 0 or rope_dim > kv.params.head_size:
        raise ValueError(f"Invalid shape of q: expected q head size = k head size ({k.shape[-1]}) + rope columns "
                         f"taken from the cache (0..{kv.params.head_size}), got {q.shape[-1]}")


def mla_prefill_kv_cache_ragged(q: Tensor, k: Tensor, v: Tensor, buffer_row_offsets: Tensor, cache_offsets: Tensor,
                                input_row_offsets: Tensor, kv_collection, layer_idx: int, scale: float, *,
                                mask: str = "causal", local_window_size: int = -1, output: Tensor | None = None,
                                return_lse: bool = False, backend: str = "auto"):
    """Ragged MLA prefill attention over one decompressed chunk.

    `out[g, h] = softmax_j(scale * q[g, h] . K[h, j]) @ V[h, j]` over the chunk's keys of g's sequence that are
    `< N_b` and visible under the mask; `K[h, j] = [k[bro[b]+j, h], cache rope columns at co[b]+j]`.

    Args:
        q: `[T, H, Dqk]` (192 for DeepSeek); k: `[R, H, Dn]` (128); v: `[R, H, Dv]` (128); strided views of
            the decompressed k_buffer are fine (unit stride in the last dimension).
        buffer_row_offsets: int32 `[B+1]`; cache_offsets: int32 `[B]` (one chunk of the plan).
        input_row_offsets: int32 `[B+1]`; scale: softmax scale; mask / local_window_size: see docs/layout.md.
        output: optional `[T, H, Dv]` in q's dtype or float32 (what `mla_prefill` merges chunks in).
    Returns:
        output `[T, H, Dv]`, and with return_lse the float32 LSE `[T, H]` (-inf where no key is visible).
    """
    kv = check_collection(kv_collection, layer_idx, mla=True)
    _check_prefill_qkv(q, k, v, kv)
    code, window = mask_code(mask, local_window_size)
    scale = check_float("scale", scale)
    check_bool("return_lse", return_lse)
    check_offsets_for(kv, input_row_offsets, q.shape[0])
    check_row_offsets("buffer_row_offsets", buffer_row_offsets, batch_size=kv.batch_size, total_rows=None,
                      device=kv.device)
    check_tensor("cache_offsets", cache_offsets, shape=(kv.batch_size,), dtype=torch.int32, device=kv.device,
                 contiguous_last_dim=True)
    if values_checkable(buffer_row_offsets) and kv.batch_size and int(buffer_row_offsets[-1]) > k.shape[0]:
        raise ValueError(f"Invalid buffer_row_offsets: expected buffer_row_offsets[-1] <= {k.shape[0]} (rows of "
                         f"k), got {int(buffer_row_offsets[-1])}")
    check_chunk_sources(kv, input_row_offsets, buffer_row_offsets, cache_offsets,
                        ("buffer_row_offsets", "cache_offsets"))
    out_shape = (q.shape[0], q.shape[1], v.shape[-1])
    if output is None:
        output = q.new_empty(out_shape)
    else:
        check_tensor("output", output, shape=out_shape, dtype=(q.dtype, torch.float32), device=kv.device,
                     contiguous_last_dim=True)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    chosen = _dispatch.resolve("mla_prefill_kv_cache_ragged", backend, kv.device)
    torch.ops.pagedmla.mla_prefill_kv_cache_ragged(
        q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, kv.blocks, kv.cache_lengths,
        kv.lookup_table, kv.scales, kv.params.quantization_granularity or 0, layer_idx, scale, code, window, output,
        lse, chosen)
    return (output, lse) if return_lse else output


def mla_prefill(q: Tensor, input_row_offsets: Tensor, kv_collection, layer_idx: int, kv_b_proj_weight: Tensor,
                scale: float, *, buffer_size: int = 16384, mask: str = "causal", local_window_size: int = -1,
                return_lse: bool = False, backend: str = "auto"):
    """Full MLA prefill of a step, however long: plan, then per chunk decompress + attend, merged by LSE.

    Args:
        q: `[T, H, qk_nope_head_dim + qk_rope_head_dim]` with rope already applied.
        kv_b_proj_weight: `[H * (qk_nope_head_dim + v_head_dim), kv_lora_rank]`.
        buffer_size: rows of the decompression buffer (memory: `buffer_size * H * (Dn + Dv)` elements).
    Returns:
        `[T, H, v_head_dim]` in q's dtype (and the float32 LSE `[T, H]` with return_lse).
    """
    kv = check_collection(kv_collection, layer_idx, mla=True)
    check_tensor("q", q, ndim=3, dtype=FLOAT_DTYPES, device=kv.device, contiguous_last_dim=True)
    check_tensor("kv_b_proj_weight", kv_b_proj_weight, ndim=2, dtype=q.dtype, device=kv.device,
                 contiguous_last_dim=True)
    num_heads = q.shape[1]
    scale = check_float("scale", scale)
    check_bool("return_lse", return_lse)
    if kv_b_proj_weight.shape[1] > kv.params.head_size:
        raise ValueError(f"Invalid shape of kv_b_proj_weight: expected kv_lora_rank (dim 1) <= head_size "
                         f"{kv.params.head_size}, got {tuple(kv_b_proj_weight.shape)}")
    if kv_b_proj_weight.shape[0] % num_heads:
        raise ValueError(f"Invalid shape of kv_b_proj_weight: expected dim 0 a multiple of num_heads={num_heads}, "
                         f"got {tuple(kv_b_proj_weight.shape)}")
    per_head = kv_b_proj_weight.shape[0] // num_heads
    rope_dim = kv.params.head_size - kv_b_proj_weight.shape[1]
    nope = q.shape[-1] - rope_dim
    v_dim = per_head - nope
    if nope <= 0 or v_dim <= 0:
        raise ValueError(f"Invalid shape of q: expected qk_nope_head_dim + qk_rope_head_dim with rope dim "
                         f"{rope_dim} (head_size - kv_lora_rank) and nope < {per_head}, got {q.shape[-1]}")
    check_int("buffer_size", buffer_size, min_value=1)
    mask_code(mask, local_window_size)
    check_offsets_for(kv, input_row_offsets, q.shape[0])
    counts = (input_row_offsets[1:] - input_row_offsets[:-1]).long()
    aligned = (kv.cache_lengths.long() + counts + kv.page_size - 1) // kv.page_size * kv.page_size
    num_chunks = max(1, -(-int(aligned.sum()) // buffer_size))
    bro, co, lengths = mla_prefill_plan(input_row_offsets, kv, buffer_size, num_chunks, backend=backend)
    rank = kv_b_proj_weight.shape[1]
    latent = q.new_empty((buffer_size, rank))
    k_buffer = q.new_empty((buffer_size, num_heads * per_head))
    kv_view = k_buffer.view(buffer_size, num_heads, per_head)
    out = lse = None
    for c, length in enumerate(lengths.tolist()):
        if length <= 0:
            continue
        mla_decompress_k_cache_ragged_paged(bro[c], co[c], length, kv_b_proj_weight, kv, layer_idx, latent,
                                            k_buffer, backend=backend)
        # Several chunks merge in float32, so the result is rounded to q's dtype once.
        o_c = q.new_empty((q.shape[0], num_heads, v_dim), dtype=torch.float32 if num_chunks > 1 else q.dtype)
        o_c, lse_c = mla_prefill_kv_cache_ragged(
            q, kv_view[..., :nope], kv_view[..., nope:], bro[c], co[c], input_row_offsets, kv, layer_idx, scale,
            mask=mask, local_window_size=local_window_size, output=o_c, return_lse=True, backend=backend)
        if out is None:
            out, lse = o_c.float(), lse_c
        else:
            out, lse = _merge(out, lse, o_c, lse_c)
    if out is None:
        out = torch.zeros(q.shape[0], num_heads, v_dim, device=q.device)
        lse = torch.full(q.shape[:2], float("-inf"), device=q.device)
    out = out.to(q.dtype)
    return (out, lse) if return_lse else out


def _merge(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Merge two partial attention results over disjoint key sets by their LSE (float32)."""
    return merge_states([out_a, out_b.float()], [lse_a, lse_b])
