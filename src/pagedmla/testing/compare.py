"""Comparisons that say where and by how much two tensors differ."""

from __future__ import annotations

import torch


def error_report(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """Max abs / rel error, where the max abs error is, and NaN counts."""
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    diff = (a - e).abs()
    nan_a, nan_e = int(torch.isnan(a).sum()), int(torch.isnan(e).sum())
    finite = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    idx = tuple(int(i) for i in torch.unravel_index(finite.argmax(), finite.shape)) if finite.numel() else ()
    rel = (diff / e.abs().clamp_min(1e-6)).nan_to_num(float("inf"))
    return (f"max abs err {float(finite.max()) if finite.numel() else 0:.3e} at {idx} "
            f"(actual {float(a[idx]) if idx else 0:.5g}, expected {float(e[idx]) if idx else 0:.5g}), "
            f"max rel err {float(rel.max()) if rel.numel() else 0:.3e}, NaN actual/expected {nan_a}/{nan_e}, "
            f"shape {tuple(a.shape)}")


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float = 0.0,
                 name: str = "output") -> None:
    """`|actual - expected| <= atol + rtol * |expected|` elementwise; NaN and inf must match exactly."""
    if actual.shape != expected.shape:
        raise AssertionError(f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}")
    a, e = actual.detach().double().cpu(), expected.detach().double().cpu()
    same_special = (torch.isnan(a) == torch.isnan(e)).all() and (torch.isinf(a) == torch.isinf(e)).all()
    inf_ok = bool((a[torch.isinf(e)] == e[torch.isinf(e)]).all())
    finite = torch.isfinite(e)
    ok = bool(same_special) and inf_ok and bool(((a - e).abs()[finite] <= atol + rtol * e.abs()[finite]).all())
    if not ok:
        raise AssertionError(f"{name} differs (atol {atol}, rtol {rtol}): {error_report(actual, expected)}")


def assert_close_to_reference(actual: torch.Tensor, ref_fp32: torch.Tensor, ref_lowprec: torch.Tensor | None = None,
                              *, eps: float = 1e-5, name: str = "output") -> None:
    """Tolerance from PyTorch's own error: `|actual - ref32| <= 2 * |ref_lowprec - ref32| + eps` elementwise.

    ref_lowprec is the same computation done in the kernel's precision (e.g. the reference on bf16-rounded
    intermediates); None means exact float32 work, where only eps applies.
    """
    a, r = actual.detach().double().cpu(), ref_fp32.detach().double().cpu()
    bound = torch.full_like(r, eps)
    if ref_lowprec is not None:
        bound = bound + 2 * (ref_lowprec.detach().double().cpu() - r).abs().nan_to_num(0.0)
    finite = torch.isfinite(r)
    special_ok = bool((torch.isnan(a) == torch.isnan(r)).all()) and bool((a[torch.isinf(r)] == r[torch.isinf(r)]).all())
    if not special_ok or not bool(((a - r).abs()[finite] <= bound[finite]).all()):
        raise AssertionError(f"{name} differs from the float32 reference beyond 2x PyTorch's own error + {eps}: "
                             f"{error_report(actual, ref_fp32)}")
