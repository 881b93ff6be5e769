"""Backend choice. Kernel modules register their host launchers here; ops call `resolve` then `impl`.

`auto` picks Triton for CUDA tensors when the op has a Triton kernel, else the reference (which runs on any
device). Asking for `triton` where no kernel exists is a NotImplementedError, never a silent fallback.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable

import torch

from .._checks import check_backend

# op name -> "module:function" of its Triton host launcher (imported lazily: importing pagedmla never
# imports triton).
TRITON_LAUNCHERS: dict[str, str] = {}
# op name -> the optional features its Triton launcher handles (e.g. "fp8_cache", "sink" for decode).
# A call that needs a feature outside this set runs the reference under "auto" and is a NotImplementedError
# under "triton". Ops without an entry need no features.
TRITON_FEATURES: dict[str, frozenset[str]] = {}
# op name -> "module:function" of its float32 reference.
REFERENCE_IMPLS: dict[str, str] = {}


_LOADED: dict[str, Callable] = {}


def _load(target: str) -> Callable:
    # Cached, so code traced by torch.compile after the first call sees a plain dict lookup.
    fn = _LOADED.get(target)
    if fn is None:
        module, _, name = target.partition(":")
        fn = _LOADED[target] = getattr(importlib.import_module(module), name)
    return fn


def interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def gluon_kernels_available() -> bool:
    """Whether the Gluon (warp-specialized Hopper) kernels can run: they are written against Triton 3.6's Gluon
    API, which changes between releases; other versions run the Triton kernels."""
    import triton

    return tuple(int(x) for x in triton.__version__.split(".")[:2]) == (3, 6)


def is_hopper(device: torch.device) -> bool:
    """An NVIDIA Hopper GPU (warpgroup MMAs and TMA; ROCm devices also report type "cuda")."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability_major(index) == 9


@functools.lru_cache(maxsize=16)
def _capability_major(index: int) -> int:
    # cached: the decode launcher asks on every call (once per layer and step)
    return torch.cuda.get_device_capability(index)[0]


def resolve(op_name: str, backend: str, device: torch.device, features: frozenset[str] = frozenset()) -> str:
    """The backend that will run `op_name` (with the optional `features` a call needs) on `device`."""
    check_backend(backend)
    if backend == "reference":
        return "reference"
    missing = sorted(features - TRITON_FEATURES.get(op_name, frozenset()))
    has_kernel = op_name in TRITON_LAUNCHERS and not missing
    if backend == "triton":
        if op_name not in TRITON_LAUNCHERS:
            raise NotImplementedError(f"pagedmla.{op_name} has no Triton kernel yet; use backend='reference'")
        if missing:
            raise NotImplementedError(f"pagedmla.{op_name}: the Triton kernel does not support {missing} yet; "
                                      f"use backend='reference'")
        if device.type != "cuda" and not interpreter_enabled():
            raise ValueError(f"Invalid backend for {op_name}: expected CUDA tensors for backend='triton' "
                             f"(or TRITON_INTERPRET=1 to run the interpreter on CPU), got tensors on {device}")
        return "triton"
    return "triton" if device.type == "cuda" and has_kernel else "reference"


def impl(op_name: str, backend: str) -> Callable:
    table = TRITON_LAUNCHERS if backend == "triton" else REFERENCE_IMPLS
    return _load(table[op_name])


def ring_layout_ok(q, blocks, out) -> bool:
    """What the Gluon ring kernels (`kernels.mla_sparse_decode_ring`, `kernels.mla_decode_ring`) need of the
    layout: unit last strides, a 16-byte aligned cache whose page, layer and slot strides are multiples of 32
    bytes (the copies are 16 bytes wide, and the compiler knows a stride's alignment only from its value's
    divisibility by 16 elements: 2-byte elements, or the rope-aware row's bf16 view)."""
    return (q.stride(-1) == 1 and out.stride(-1) == 1 and blocks.stride(-1) == 1 and blocks.data_ptr() % 16 == 0
            and all(blocks.stride(d) * blocks.element_size() % 32 == 0 for d in (0, 2, 3)))


def ring_dtypes_ok(q_dtype, cache_dtype, head_size: int, rope_aware: bool) -> bool:
    """q and cache both bf16 or both fp16 (rows of 576), or a bf16 q with the rope-aware FP8 row (640 bytes)."""
    if rope_aware:
        return q_dtype == torch.bfloat16 and cache_dtype == torch.float8_e4m3fn and head_size == 640
    return q_dtype in (torch.bfloat16, torch.float16) and cache_dtype == q_dtype and head_size == 576
