"""MLA decode: the per-step plan and the decode op (dense with masks, multi-token, sparse, sinks, FP8, split-KV)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._checks import FLOAT_DTYPES, FP8_DTYPES, check_float, check_int, check_tensor, values_checkable
from ..cache import PagedKVCacheCollection
from ..masks import MASK_CODES, mask_code
from . import _dispatch
from ._common import check_collection, check_offsets_for, library_op, max_cache_length, max_seq_length

_dispatch.REFERENCE_IMPLS["mla_decode_kv_cache_ragged"] = "pagedmla.reference.decode:mla_decode_kv_cache_ragged"
# Sparse (top-k indices) decode is its own kernel family; it shares the op, the reference and the launcher call.
_dispatch.REFERENCE_IMPLS["mla_sparse_decode"] = "pagedmla.reference.decode:mla_decode_kv_cache_ragged"
_dispatch.REFERENCE_IMPLS["mla_decode_plan"] = "pagedmla.ops.decode:_reference_plan"
_dispatch.REFERENCE_IMPLS["mla_decode_plan_refresh"] = "pagedmla.ops.decode:_reference_refresh"
_dispatch.TRITON_LAUNCHERS["mla_decode_kv_cache_ragged"] = "pagedmla.ops._triton_decode:decode"
_dispatch.TRITON_LAUNCHERS["mla_decode_plan"] = "pagedmla.ops._triton_decode:plan"
_dispatch.TRITON_LAUNCHERS["mla_decode_plan_refresh"] = "pagedmla.ops._triton_decode:refresh_plan"
_dispatch.TRITON_FEATURES["mla_decode_kv_cache_ragged"] = frozenset({"sink", "fp32", "fp8_cache", "fp8_q", "rope_aware"})
_dispatch.TRITON_LAUNCHERS["mla_sparse_decode"] = "pagedmla.ops._triton_sparse_decode:sparse_decode"
_dispatch.TRITON_FEATURES["mla_sparse_decode"] = frozenset({"extra_k", "sink", "fp8_cache", "fp8_q", "rope_aware",
                                                            "fold_shared_index", "fp32"})


@dataclass(frozen=True)
class DecodePlan:
    """Dispatch metadata of one decode step, built once by `mla_decode_plan` and reused by every layer.

    Attributes:
        scalar_args: int32 `[4]` on the device: batch size, max query tokens per sequence, KV partitions,
            max keys per sequence (MAX's `scalar_args_buf`).
        batch_size, max_seq_length, num_partitions: the same values on the host (they size launch grids).
        schedule: int32 work list of the split-KV scheduler on the device (empty for the reference backend).
        backend: the backend the plan was built for.
        granularity: keys per unit of the schedule (Triton plans; 0: none), kept when the plan is refreshed.
        num_heads: the query heads it was built for (its schedule and tiles are sized by them; a dense decode
            with another head count is a ValueError); 0 only in a plan not built by `mla_decode_plan`.
        long_pieces: whether the schedule's pieces are long (`ops._triton_decode.pieces_are_long`, from the
            longest sequence when the plan is built; a refill keeps it, so that a captured CUDA graph's
            launches stay fixed, and a compiled caller sees a flag, not a length that changes every step): the
            16-row FP8 decode then runs its register-operand kernel.
    """

    scalar_args: Tensor
    batch_size: int
    max_seq_length: int
    num_partitions: int
    schedule: Tensor
    backend: str
    granularity: int = 0
    num_heads: int = 0
    long_pieces: bool = False
    # host copies of the offsets and lengths a Triton plan was built or last refilled with, kept where reading
    # them is free (CPU tensors) so that a decode can check the plan is for its lengths; None elsewhere
    _host_lengths: tuple | None = field(default=None, repr=False, compare=False)


def _reference_plan(input_row_offsets: Tensor, kv: PagedKVCacheCollection, num_heads: int,
                    num_partitions: int | None, max_q: int, max_keys: int) -> DecodePlan:
    parts = 1 if num_partitions is None else num_partitions
    args = torch.tensor([kv.batch_size, max_q, parts, max_keys], dtype=torch.int32, device=kv.device)
    return DecodePlan(args, kv.batch_size, max_q, parts, torch.empty(0, dtype=torch.int32, device=kv.device),
                      "reference", num_heads=num_heads)


def _reference_refresh(plan: DecodePlan, input_row_offsets: Tensor, kv: PagedKVCacheCollection) -> None:
    """The reference reads nothing from a plan but its partition count: nothing to refill."""


def mla_decode_plan(input_row_offsets: Tensor, kv_collection, *, num_heads: int, num_partitions: int | None = None,
                    out: DecodePlan | None = None, backend: str = "auto") -> DecodePlan:
    """Build the decode plan of one step (once per step; every layer reuses it).

    Reads `max n_b` and `max N_b` from the collection when the caller gave them (the manager does), else
    from the offsets (one host sync, here and not per layer).

    Args:
        input_row_offsets: int32 `[B+1]` query rows per sequence.
        kv_collection: the step's MLA cache collection.
        num_heads: query heads (the scheduler sizes tiles by it).
        num_partitions: force this many KV partitions (None: the backend decides; for the Triton backend it is
            the number of workers that share the batch's key blocks).
        out: a plan of an earlier step to refill in place (same batch size and num_heads, every n_b within its
            max_seq_length), e.g. before replaying a CUDA graph that captured decodes with it. Returns `out`.
    """
    kv = check_collection(kv_collection, 0, mla=True)
    check_int("num_heads", num_heads, min_value=1)
    if num_partitions is not None:
        check_int("num_partitions", num_partitions, min_value=1)
    check_offsets_for(kv, input_row_offsets, None)
    if out is not None:
        if not isinstance(out, DecodePlan):
            raise ValueError(f"Invalid type of out: expected DecodePlan, got {type(out).__name__}")
        if backend not in ("auto", out.backend):
            raise ValueError(f"Invalid backend: expected 'auto' or {out.backend!r} (the backend of the plan to "
                             f"refill, out), got {backend!r}")
        if out.batch_size != kv.batch_size:
            raise ValueError(f"Invalid out: expected a plan for batch size {kv.batch_size}, got {out.batch_size}")
        if out.num_heads != num_heads:
            raise ValueError(f"Invalid out: expected a plan built for num_heads={num_heads}, got one for "
                             f"{out.num_heads}")
        if kv.max_seq_length is not None and kv.max_seq_length > out.max_seq_length:
            raise ValueError(f"Invalid out: expected a plan with max_seq_length >= {kv.max_seq_length}, got "
                             f"{out.max_seq_length}")
        _dispatch.impl("mla_decode_plan_refresh", out.backend)(out, input_row_offsets, kv)
        return _remember_lengths(out, input_row_offsets, kv.cache_lengths)
    chosen = _dispatch.resolve("mla_decode_plan", backend, kv.device)
    max_q, max_keys = max_seq_length(kv, input_row_offsets), max_cache_length(kv, input_row_offsets)
    plan = _dispatch.impl("mla_decode_plan", chosen)(input_row_offsets, kv, num_heads, num_partitions, max_q,
                                                     max_keys)
    return _remember_lengths(plan, input_row_offsets, kv.cache_lengths)


def _remember_lengths(plan: DecodePlan, input_row_offsets: Tensor, cache_lengths: Tensor) -> DecodePlan:
    """`plan` with host copies of the lengths its Triton schedule was cut for, where reading them is free."""
    keep = plan.backend == "triton" and values_checkable(input_row_offsets, cache_lengths)
    object.__setattr__(plan, "_host_lengths",  # the plan is frozen: its fields are set here only
                       (input_row_offsets.clone(), cache_lengths.clone()) if keep else None)
    return plan


@library_op("mla_decode_kv_cache_ragged", mutates_args=("out", "lse"))
def _decode_op(q: Tensor, input_row_offsets: Tensor, blocks: Tensor, cache_lengths: Tensor, lookup_table: Tensor,
               scales: Tensor | None, plan_args: Tensor, plan_schedule: Tensor, out: Tensor, lse: Tensor,
               q_scale: Tensor | None, indices: Tensor | None, topk_lengths: Tensor | None,
               attn_sink: Tensor | None, extra_blocks: Tensor | None, extra_scales: Tensor | None,
               extra_indices: Tensor | None, extra_topk_lengths: Tensor | None, layer_idx: int, scale: float,
               mask_code: int, window: int, num_partitions: int, max_seq_length: int, long_pieces: bool,
               rope_aware: bool, qk_rope_head_dim: int, fold_shared_index: bool, quant_granularity: int,
               extra_quant_granularity: int, backend: str) -> None:
    fn = _dispatch.impl("mla_sparse_decode" if indices is not None else "mla_decode_kv_cache_ragged", backend)
    common = dict(q_scale=q_scale, rope_aware=rope_aware, qk_rope_head_dim=qk_rope_head_dim, indices=indices,
                  topk_lengths=topk_lengths, attn_sink=attn_sink, extra_blocks=extra_blocks,
                  extra_scales=extra_scales, extra_indices=extra_indices, extra_topk_lengths=extra_topk_lengths,
                  quant_granularity=quant_granularity, extra_quant_granularity=extra_quant_granularity)
    if backend == "triton":
        # the plan's piece length picks among the dense kernels only
        dense = {} if indices is not None else {"long_pieces": long_pieces}
        fn(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx, scale, mask_code, window,
           num_partitions, out, lse, plan_args=plan_args, plan_schedule=plan_schedule,
           max_seq_length=max_seq_length, fold_shared_index=fold_shared_index, **dense, **common)
    else:
        fn(q, input_row_offsets, blocks, cache_lengths, lookup_table, scales, layer_idx, scale, mask_code, window,
           num_partitions, out, lse, **common)


_decode_op.register_fake(lambda *args, **kwargs: None)


def _check_sparse(name: str, idx, lengths, lengths_name: str, num_rows: int, batch: int, device, input_row_offsets,
                  pool_rows: int):
    check_tensor(name, idx, shape=(num_rows, None), dtype=torch.int32, device=device, contiguous_last_dim=True)
    if lengths is None:
        raise ValueError(f"Invalid {lengths_name}: expected int32 [{batch}] with {name}, got None")
    check_tensor(lengths_name, lengths, shape=(batch,), dtype=torch.int32, device=device, contiguous_last_dim=True)
    if values_checkable(idx, lengths) and batch:
        if int(lengths.min()) < 0 or int(lengths.max()) > idx.shape[1]:
            raise ValueError(f"Invalid {lengths_name}: expected values in [0, {idx.shape[1]}] (columns of {name}), "
                             f"got [{int(lengths.min())}, {int(lengths.max())}]")
        # Only the first topk_lengths[b] entries of a row count; those must be -1 or a row of the pool.
        rows_seq = torch.searchsorted(input_row_offsets[1:].long(), torch.arange(num_rows), right=True)
        counted = torch.arange(idx.shape[1]).view(1, -1) < lengths.long()[rows_seq].view(-1, 1)
        vals = idx[counted]
        if vals.numel() and (int(vals.min()) < -1 or int(vals.max()) >= pool_rows):
            raise ValueError(f"Invalid {name}: expected -1 or physical rows in [0, {pool_rows}) "
                             f"(num_blocks * page_size), got values from {int(vals.min())} to {int(vals.max())}")


def _check_fold(name: str, indices, input_row_offsets):
    """fold_shared_index promises identical index rows within a sequence (main and extra streams); verify
    where it is cheap."""
    if not values_checkable(indices, input_row_offsets):
        return
    offs = input_row_offsets.tolist()
    for b in range(len(offs) - 1):
        rows = indices[offs[b]: offs[b + 1]]
        if rows.shape[0] > 1 and not bool((rows == rows[:1]).all()):
            raise ValueError(f"Invalid fold_shared_index=True: expected every query token of a sequence to share "
                             f"one {name} row, got different rows in sequence {b}")


def _decode_dims(q, kv, rope_aware: bool, qk_rope_head_dim: int, q_scale) -> int:
    """Validate q against the cache layout; return kv_lora_rank."""
    head_size = kv.params.head_size
    check_int("qk_rope_head_dim", qk_rope_head_dim, min_value=1, max_value=head_size - 1)
    check_tensor("q", q, ndim=3, dtype=FLOAT_DTYPES + FP8_DTYPES, device=kv.device, contiguous_last_dim=True)
    if rope_aware != kv.params.per_token_scale_rope_aware:
        raise ValueError(f"Invalid per_token_scale_rope_aware: expected {kv.params.per_token_scale_rope_aware} "
                         f"(the cache's layout, KVCacheParams.per_token_scale_rope_aware), got {rope_aware}")
    if rope_aware:
        rank = head_size - 2 * qk_rope_head_dim
        if rank <= 0:
            raise ValueError(f"Invalid qk_rope_head_dim: expected 2 * qk_rope_head_dim < head_size {head_size} for "
                             f"the rope-aware row, got {qk_rope_head_dim}")
        want = head_size if q.dtype in FP8_DTYPES else rank + qk_rope_head_dim
    else:
        rank = head_size - qk_rope_head_dim
        want = head_size
    if q.shape[-1] != want:
        raise ValueError(f"Invalid shape of q: expected last dimension {want}, got {tuple(q.shape)}")
    if q.dtype in FP8_DTYPES:
        if q_scale is None:
            raise ValueError("Invalid q_scale: expected float32 [T] for an FP8 q, got None")
        check_tensor("q_scale", q_scale, shape=(q.shape[0],), dtype=torch.float32, device=kv.device,
                     contiguous_last_dim=True)
    elif q_scale is not None:
        raise ValueError(f"Invalid q_scale: expected None for a {q.dtype} q (q_scale dequantizes FP8 q), got a tensor")
    return rank


def mla_decode_kv_cache_ragged(q: Tensor, input_row_offsets: Tensor, kv_collection, layer_idx: int, scale: float, *,
                               mask: str = "causal", local_window_size: int = -1, output: Tensor | None = None,
                               plan: DecodePlan | None = None, num_partitions: int | None = None,
                               return_lse: bool = False, q_scale: Tensor | None = None,
                               per_token_scale_rope_aware: bool = False, indices: Tensor | None = None,
                               topk_lengths: Tensor | None = None, attn_sink: Tensor | None = None,
                               extra_k: PagedKVCacheCollection | None = None, extra_indices: Tensor | None = None,
                               extra_topk_lengths: Tensor | None = None, fold_shared_index: bool = False,
                               qk_rope_head_dim: int = 64, backend: str = "auto"):
    """Absorbed MLA decode over the paged latent cache.

    `out[g, h] = sum_j softmax_j(scale * q[g, h] . K_j) V_j`, `V_j = K_j[:kv_lora_rank]`; keys are the cache rows
    `[0, N_b)` of g's sequence under the mask at `L_b + s` (dense), or the physical rows of `indices` (sparse).

    Args:
        q: `[T, H, 576]` bf16/fp16/fp32, or FP8 with `q_scale` float32 `[T]` (the rope-aware row: `[T, H, 640]`).
        input_row_offsets: int32 `[B+1]` query tokens per sequence (any n_b >= 0: MTP / verification).
        kv_collection: the MLA cache; layer_idx: its layer; scale: softmax scale.
        mask, local_window_size: see docs/layout.md (sparse decode needs mask="null").
        output: optional `[T, H, kv_lora_rank]` (bf16 for FP8 q, else q's dtype).
        plan: from `mla_decode_plan` (built here when None), for q's head count (dense decode);
            num_partitions overrides its KV split.
        return_lse: also return the float32 LSE `[T, H]` (sink excluded; -inf for rows with no visible key).
        indices / topk_lengths: int32 `[T, topk]` physical rows (`block * page_size + slot`, -1 skips) and `[B]`.
        attn_sink: float32 `[H]` natural-log logits added once to each softmax denominator.
        extra_k / extra_indices / extra_topk_lengths: a second cache whose rows join the same softmax.
        fold_shared_index: promise that all query tokens of a sequence share one index row, in `indices` and in
            `extra_indices` (a speed hint: the kernel gathers once per sequence).
        qk_rope_head_dim: rope columns at the end of a row (64).
    Returns:
        output, or (output, lse) with return_lse.
    """
    kv = check_collection(kv_collection, layer_idx, mla=True)
    for flag, value in (("return_lse", return_lse), ("per_token_scale_rope_aware", per_token_scale_rope_aware),
                        ("fold_shared_index", fold_shared_index)):
        if not isinstance(value, bool):
            raise ValueError(f"Invalid {flag}: expected a bool, got {type(value).__name__}")
    rank = _decode_dims(q, kv, per_token_scale_rope_aware, qk_rope_head_dim, q_scale)
    num_rows, num_heads = q.shape[0], q.shape[1]
    code, window = mask_code(mask, local_window_size)
    scale = check_float("scale", scale)
    batch = check_offsets_for(kv, input_row_offsets, num_rows)
    if indices is not None:
        if code != MASK_CODES["null"]:
            raise ValueError(f"Invalid mask: expected 'null' for sparse decode (indices given), got {mask!r}")
        _check_sparse("indices", indices, topk_lengths, "topk_lengths", num_rows, batch, kv.device, input_row_offsets,
                      kv.num_blocks * kv.page_size)
        if fold_shared_index:
            _check_fold("indices", indices, input_row_offsets)
    elif topk_lengths is not None or extra_k is not None or fold_shared_index:
        raise ValueError("Invalid indices: expected int32 [T, topk] with topk_lengths, extra_k or "
                         "fold_shared_index, got None")
    extra_blocks = extra_scales = None
    extra_granularity = 0
    if extra_k is not None:
        ek = check_collection(extra_k, layer_idx, mla=True, name="extra_k")
        want = (kv.params.head_size, kv.params.dtype, kv.params.per_token_scale_rope_aware)
        got = (ek.params.head_size, ek.params.dtype, ek.params.per_token_scale_rope_aware)
        if got != want:
            raise ValueError(f"Invalid extra_k: expected (head_size, dtype, per_token_scale_rope_aware) {want}, "
                             f"got {got}")
        if ek.device != kv.device:
            raise ValueError(f"Invalid device of extra_k: expected {kv.device}, got {ek.device}")
        if extra_indices is None:
            raise ValueError("Invalid extra_indices: expected int32 [T, extra_topk] with extra_k, got None")
        _check_sparse("extra_indices", extra_indices, extra_topk_lengths, "extra_topk_lengths", num_rows, batch,
                      kv.device, input_row_offsets, ek.num_blocks * ek.page_size)
        if fold_shared_index:
            _check_fold("extra_indices", extra_indices, input_row_offsets)
        extra_blocks, extra_scales = ek.blocks, ek.scales
        extra_granularity = ek.params.quantization_granularity or 0
    elif extra_indices is not None or extra_topk_lengths is not None:
        raise ValueError("Invalid extra_k: expected a PagedKVCacheCollection with extra_indices, got None")
    if attn_sink is not None:
        check_tensor("attn_sink", attn_sink, shape=(num_heads,), dtype=torch.float32, device=kv.device,
                     contiguous_last_dim=True)
    out_dtype = torch.bfloat16 if q.dtype in FP8_DTYPES else q.dtype
    out_shape = (num_rows, num_heads, rank)
    if output is None:
        output = torch.empty(out_shape, dtype=out_dtype, device=q.device)
    else:
        check_tensor("output", output, shape=out_shape, dtype=out_dtype, device=kv.device, contiguous_last_dim=True)
    tile_friendly = all(d >= 16 and d & (d - 1) == 0 for d in (rank, qk_rope_head_dim))
    features = {name for name, used in (
        ("extra_k", extra_k is not None), ("sink", attn_sink is not None),
        ("fp8_cache", kv.params.is_fp8), ("fp8_q", q.dtype in FP8_DTYPES), ("rope_aware", per_token_scale_rope_aware),
        ("fp32", q.dtype == torch.float32), ("fold_shared_index", fold_shared_index),
        # kv_lora_rank / qk_rope_head_dim that are not powers of two >= 16 cannot be Triton tiles
        ("non_pow2_dims", not tile_friendly)) if used}
    op_key = "mla_sparse_decode" if indices is not None else "mla_decode_kv_cache_ragged"
    chosen = _dispatch.resolve(op_key, backend, kv.device, frozenset(features))
    if num_partitions is not None:
        check_int("num_partitions", num_partitions, min_value=1)
    if plan is None:
        if indices is None:
            plan = mla_decode_plan(input_row_offsets, kv, num_heads=num_heads, num_partitions=num_partitions,
                                   backend=chosen)
        else:
            # Sparse decode splits each index list on its own; it needs no split-KV schedule, and reads max n_b
            # only for fold_shared_index (a host sync unless the collection carries it). No host-to-device copy
            # either, so that a call without a plan can be captured in a CUDA graph.
            max_q = max_seq_length(kv, input_row_offsets) if fold_shared_index else 1
            # scalar_args is left unset: no sparse launcher (Triton or reference) reads it
            plan = DecodePlan(torch.empty(4, dtype=torch.int32, device=kv.device), batch, max_q, 1,
                              torch.empty(0, dtype=torch.int32, device=kv.device), "reference", num_heads=num_heads)
    elif not isinstance(plan, DecodePlan):
        raise ValueError(f"Invalid type of plan: expected DecodePlan (from mla_decode_plan), got {type(plan).__name__}")
    elif plan.batch_size != batch:
        raise ValueError(f"Invalid plan: expected a plan for batch size {batch}, got one for {plan.batch_size}")
    elif chosen == "triton" and indices is None and plan.backend != "triton":
        # The reference reads nothing but the partition count from a plan; the kernels need their schedule.
        raise ValueError(f"Invalid plan: expected a plan built for backend 'triton', got {plan.backend!r}")
    elif indices is None and plan.num_heads != num_heads:
        # The answer would still be right, but the schedule was cut for other tiles (a 16-head plan at B64 has
        # two workers per SM; a 128-head call on it would run four programs per SM of a one-per-SM kernel).
        got = f"one for {plan.num_heads}" if plan.num_heads else "a plan without one (build plans with mla_decode_plan)"
        raise ValueError(f"Invalid plan: expected a plan built for num_heads={num_heads} (q's heads), got {got}")
    else:
        # The plan's grid covers plan.max_seq_length query tokens per sequence: more would leave rows unwritten.
        need = kv.max_seq_length
        if need is None and values_checkable(input_row_offsets) and batch:
            need = int((input_row_offsets[1:] - input_row_offsets[:-1]).max())
        if need is not None and need > plan.max_seq_length:
            raise ValueError(f"Invalid plan: expected a plan with max_seq_length >= {need} (query tokens of a "
                             f"sequence this step), got {plan.max_seq_length}")
        # A Triton plan's schedule is cut for the lengths it was built (or refilled) with; on other lengths the
        # kernels would leave keys out or read partials never written. Checked where it costs no sync (CPU).
        built_for = (plan._host_lengths if chosen == "triton" and indices is None
                     and values_checkable(input_row_offsets, kv.cache_lengths) else None)
        if built_for is not None and not (torch.equal(built_for[0], input_row_offsets)
                                          and torch.equal(built_for[1], kv.cache_lengths)):
            raise ValueError("Invalid plan: expected a plan built for this step's lengths (cache_lengths and "
                             "query tokens), got one built for other lengths; refill it each step with "
                             "mla_decode_plan(..., out=plan)")
    if indices is not None:
        # 0 lets the sparse kernel choose its split; a dense plan's worker count means nothing to it.
        parts = num_partitions or 0
    else:
        parts = plan.num_partitions if num_partitions is None else num_partitions
    lse = torch.empty((num_rows, num_heads), dtype=torch.float32, device=q.device)
    torch.ops.pagedmla.mla_decode_kv_cache_ragged(
        q, input_row_offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales, plan.scalar_args,
        plan.schedule, output, lse, q_scale, indices, topk_lengths, attn_sink, extra_blocks, extra_scales,
        extra_indices, extra_topk_lengths, layer_idx, scale, code, window, parts, plan.max_seq_length,
        plan.long_pieces, per_token_scale_rope_aware, qk_rope_head_dim, fold_shared_index,
        kv.params.quantization_granularity or 0, extra_granularity, chosen)
    return (output, lse) if return_lse else output
