"""Argument validation shared by every public op: ValueErrors that name the argument, what was expected and
what came. Metadata is always checked (shapes, dtypes, devices, unit last-dim strides, since the kernels index
1-D metadata without strides); checks that read values run only where `values_checkable` allows."""

from __future__ import annotations

from collections.abc import Sequence

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn,)


def _dtype_name(d) -> str:
    return str(d).replace("torch.", "")


def check_tensor(
    name: str,
    t,
    *,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    device: torch.device | None = None,
    contiguous_last_dim: bool = False,
) -> torch.Tensor:
    """Raise ValueError unless `t` is a tensor of the given rank, shape (None = any), dtype and device."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"Invalid type of {name}: expected a torch.Tensor, got {type(t).__name__}")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"Invalid rank of {name}: expected {ndim} dimensions, got {t.dim()} (shape {tuple(t.shape)})")
    if shape is not None and any(e is not None and e != g for e, g in zip(shape, t.shape)):
        exp = "(" + ", ".join("*" if e is None else str(e) for e in shape) + ("," if len(shape) == 1 else "") + ")"
        raise ValueError(f"Invalid shape of {name}: expected {exp}, got {tuple(t.shape)}")
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            exp = " or ".join(_dtype_name(d) for d in allowed)
            raise ValueError(f"Invalid dtype of {name}: expected {exp}, got {_dtype_name(t.dtype)}")
    if device is not None and t.device != torch.device(device):
        raise ValueError(f"Invalid device of {name}: expected {torch.device(device)}, got {t.device}")
    if contiguous_last_dim and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"Invalid layout of {name}: expected a unit stride in the last dimension, got strides {t.stride()}")
    return t


def check_int(name: str, value, *, min_value: int | None = None, max_value: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"Invalid {name}: expected an int, got {type(value).__name__}")
    if min_value is not None and value < min_value:
        raise ValueError(f"Invalid {name}: expected >= {min_value}, got {value}")
    if max_value is not None and value > max_value:
        raise ValueError(f"Invalid {name}: expected <= {max_value}, got {value}")
    return value


def check_float(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"Invalid {name}: expected a float, got {type(value).__name__}")
    return float(value)


def check_choice(name: str, value, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"Invalid {name}: expected one of {list(choices)}, got {value!r}")
    return value


def values_checkable(*tensors: torch.Tensor) -> bool:
    """Value checks (reading tensor contents) run only where they cost no device sync and no graph break."""
    if torch.compiler.is_compiling():
        return False
    return all(t.device.type == "cpu" for t in tensors if t is not None)


def check_row_offsets(name: str, offsets: torch.Tensor, *, batch_size: int | None, total_rows: int | None,
                      device: torch.device, starts_at_zero: bool = True) -> int:
    """Check a ragged offsets tensor int32 [B+1]; returns B. Values are checked on CPU only."""
    shape = (None,) if batch_size is None else (batch_size + 1,)
    check_tensor(name, offsets, shape=shape, dtype=torch.int32, device=device, contiguous_last_dim=True)
    if offsets.shape[0] < 1:
        raise ValueError(f"Invalid shape of {name}: expected (B+1,) with B >= 0, got {tuple(offsets.shape)}")
    if values_checkable(offsets):
        o = offsets.tolist()
        if starts_at_zero and o[0] != 0:
            raise ValueError(f"Invalid {name}: expected {name}[0] == 0, got {o[0]}")
        if o[0] < 0:
            raise ValueError(f"Invalid {name}: expected non-negative offsets, got {name}[0] == {o[0]}")
        for i in range(len(o) - 1):
            if o[i + 1] < o[i]:
                raise ValueError(f"Invalid {name}: expected non-decreasing offsets, got {name}[{i}]={o[i]} > {name}[{i+1}]={o[i+1]}")
        if total_rows is not None and o[-1] != total_rows:
            raise ValueError(f"Invalid {name}: expected {name}[-1] == {total_rows} (rows of the input), got {o[-1]}")
    return offsets.shape[0] - 1


def check_backend(backend: str) -> str:
    return check_choice("backend", backend, ("auto", "reference", "triton"))
