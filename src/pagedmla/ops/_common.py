"""Shared by the op families: checks of the cache collection, ragged offsets against it and values on CPU; and
the registration of the ops (`library_op`)."""

from __future__ import annotations

import inspect

import torch

from .._checks import check_row_offsets, values_checkable
from ..cache import PagedKVCacheCollection


def check_collection(kv_collection, layer_idx, *, mla: bool | None = True, writable: bool = False,
                     name: str = "kv_collection") -> PagedKVCacheCollection:
    if not isinstance(kv_collection, PagedKVCacheCollection):
        raise ValueError(f"Invalid type of {name}: expected PagedKVCacheCollection, got {type(kv_collection).__name__}")
    kv_collection.check_layer(layer_idx, "layer_idx" if name == "kv_collection" else f"{name} layer_idx")
    params = kv_collection.params
    if mla is not None and params.is_mla != mla:
        want = "an MLA cache (is_mla=True)" if mla else "an MHA cache (is_mla=False)"
        raise ValueError(f"Invalid {name}: expected {want}, got is_mla={params.is_mla}")
    if writable and params.is_fp8:
        raise ValueError(f"Invalid {name}: expected a bfloat16/float16/float32 cache for a cache write, got "
                         f"float8_e4m3fn (fill FP8 caches with pagedmla.quantize_kv_cache; see docs/layout.md)")
    return kv_collection


def check_offsets_for(kv: PagedKVCacheCollection, input_row_offsets, total_rows: int | None,
                      name: str = "input_row_offsets") -> int:
    """Ragged offsets int32 [B+1] matching the collection's batch; on CPU also checks that every sequence's
    `N_b = L_b + n_b` tokens fit in its lookup-table row and that its used pages are valid block ids."""
    batch = check_row_offsets(name, input_row_offsets, batch_size=kv.batch_size, total_rows=total_rows,
                              device=kv.device)
    if values_checkable(input_row_offsets, kv.cache_lengths, kv.lookup_table) and batch:
        counts = (input_row_offsets[1:] - input_row_offsets[:-1]).long()
        totals = kv.cache_lengths.long() + counts
        capacity = kv.lookup_table.shape[1] * kv.page_size
        worst = int(totals.argmax())
        if int(totals[worst]) > capacity:
            raise ValueError(f"Invalid kv_collection.lookup_table: sequence {worst} needs {int(totals[worst])} "
                             f"tokens, expected at most {capacity} (lookup_table has {kv.lookup_table.shape[1]} "
                             f"pages of {kv.page_size})")
        for field, actual in (("max_seq_length", int(counts.max())), ("max_cache_length", int(totals.max()))):
            given = getattr(kv, field)
            if given is not None and given < actual:
                raise ValueError(f"Invalid kv_collection.{field}: expected at least {actual} (from {name} and "
                                 f"cache_lengths), got {given}")
        used = (totals + kv.page_size - 1) // kv.page_size
        cols = torch.arange(kv.lookup_table.shape[1]).view(1, -1)
        ids = kv.lookup_table.long()[cols < used.view(-1, 1)]
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= kv.num_blocks):
            raise ValueError(f"Invalid kv_collection.lookup_table: expected block ids in [0, {kv.num_blocks}) for "
                             f"used pages, got ids from {int(ids.min())} to {int(ids.max())}")
    return batch


def max_seq_length(kv: PagedKVCacheCollection, input_row_offsets: torch.Tensor) -> int:
    """max n_b: from the collection when the caller gave it, else read from the offsets (one host sync)."""
    if kv.max_seq_length is not None:
        return kv.max_seq_length
    if torch.compiler.is_compiling():
        # No sync while tracing: a static upper bound only oversizes the grid.
        return kv.lookup_table.shape[1] * kv.page_size
    if input_row_offsets.shape[0] < 2:
        return 0
    return int((input_row_offsets[1:] - input_row_offsets[:-1]).max())


def max_cache_length(kv: PagedKVCacheCollection, input_row_offsets: torch.Tensor) -> int:
    """max N_b: from the collection when given, else computed (one host sync)."""
    if kv.max_cache_length is not None:
        return kv.max_cache_length
    if torch.compiler.is_compiling():
        return kv.lookup_table.shape[1] * kv.page_size
    if input_row_offsets.shape[0] < 2:
        return 0
    return int((kv.cache_lengths.long() + (input_row_offsets[1:] - input_row_offsets[:-1]).long()).max())


def check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"Invalid {name}: expected a bool, got {type(value).__name__}")
    return value


def check_chunk_sources(kv: PagedKVCacheCollection, input_row_offsets: torch.Tensor | None,
                        buffer_row_offsets: torch.Tensor, cache_offsets: torch.Tensor, names: tuple[str, str]) -> None:
    """On CPU: a chunk's cache positions `co[b] .. co[b] + rows_b` are >= 0 and inside sequence b's used pages
    (`align_up(N_b, page_size)`; N_b needs input_row_offsets, else L_b is used as a lower bound of the pages)."""
    if not values_checkable(buffer_row_offsets, cache_offsets, kv.cache_lengths) or not kv.batch_size:
        return
    bro_name, co_name = names
    if int(cache_offsets.min()) < 0:
        raise ValueError(f"Invalid {co_name}: expected values >= 0, got {int(cache_offsets.min())}")
    rows = (buffer_row_offsets[1:] - buffer_row_offsets[:-1]).long()
    totals = kv.cache_lengths.long()
    if input_row_offsets is not None:
        totals = totals + (input_row_offsets[1:] - input_row_offsets[:-1]).long()
    capacity = torch.minimum((totals + kv.page_size - 1) // kv.page_size * kv.page_size,
                             torch.full_like(totals, kv.lookup_table.shape[1] * kv.page_size))
    end = cache_offsets.long() + rows
    bad = (rows > 0) & (end > capacity)
    if input_row_offsets is not None and bool(bad.any()):
        b = int(bad.nonzero()[0])
        raise ValueError(f"Invalid {co_name}: sequence {b} reads cache positions up to {int(end[b])}, expected at "
                         f"most {int(capacity[b])} (its page-aligned length) with {bro_name}")


# The ops' registrations. torch.library.custom_op wraps every call in Python autograd and in-place layers that
# cost about 20 us of host time per call on the H200 machine's CPU (94 against 76 us, benchmarks/host_overhead.py);
# an op defined on a Library with the same inferred schema dispatches straight to its kernel and still traces
# under torch.compile (mutated arguments are marked in the schema, so functionalization sees them). The kernel
# wrapper keeps what custom_op gave callers: no autograd graph (the ops have no derivatives), version counters
# bumped on the mutated tensors, the PT2-compliant tag, and a definition that a re-import replaces.
try:  # torch's own registry of op libraries, which lets a re-imported module define its ops again
    from torch._library.custom_ops import get_library_allowing_overwrite as _library_for
except ImportError:  # pragma: no cover - a torch without it: one library per op, defined once per process
    def _library_for(namespace: str, name: str) -> torch.library.Library:
        return torch.library.Library(namespace, "FRAGMENT")


class LibraryOp:
    """`pagedmla::<name>` defined from a Python function's signature; its kernel on every device
    (CompositeExplicitAutograd) runs the function without recording autograd and then bumps the version counters
    of the mutated arguments. `register_fake` gives it the shape function torch.compile traces with."""

    def __init__(self, fn, name: str, mutates_args: tuple[str, ...]):
        self.name = name
        params = list(inspect.signature(fn).parameters)
        mutated = tuple(params.index(arg) for arg in mutates_args)

        def kernel(*args):
            with torch.no_grad():
                result = fn(*args)
            if mutated:
                torch.autograd.graph.increment_version([args[i] for i in mutated if args[i] is not None])
            return result

        self.lib = _library_for("pagedmla", name)
        self.lib.define(name + torch.library.infer_schema(fn, mutates_args=mutates_args),
                        tags=(torch.Tag.pt2_compliant_tag,))
        self.lib.impl(name, kernel, "CompositeExplicitAutograd")

    def register_fake(self, fake):
        torch.library.register_fake(f"pagedmla::{self.name}", fake, lib=self.lib)
        return fake


def library_op(name: str, *, mutates_args: tuple[str, ...]):
    """Decorator: register `fn` as the op `torch.ops.pagedmla.<name>` (see LibraryOp)."""
    return lambda fn: LibraryOp(fn, name, mutates_args)
