"""Masked softmax attention with LSE and the merge of partial states, in float32."""

from __future__ import annotations

import torch


def attend(logits: torch.Tensor, visible: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last axis of `logits [..., K]` restricted to `visible`, applied to `values [..., K, Dv]`.

    Returns (out [..., Dv], lse [...]); rows with no visible key give out 0 and lse -inf. Callers zero the
    values of keys that no query sees (unused cache slots may hold NaN: 0 * NaN would leak).
    """
    logits = logits.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    safe_lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    probs = torch.exp(logits - safe_lse.unsqueeze(-1)).masked_fill(~visible, 0.0)
    return probs.unsqueeze(-2).matmul(values).squeeze(-2), lse


def merge_states(outs: list[torch.Tensor], lses: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge attention results over disjoint key sets: `lse = logsumexp(lse_i)`, `out = sum exp(lse_i - lse) out_i`."""
    lse_all = torch.stack(lses)
    lse = torch.logsumexp(lse_all, dim=0)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    weights = torch.exp(lse_all - safe).masked_fill(~torch.isfinite(lse_all), 0.0)
    out = (weights.unsqueeze(-1) * torch.stack(outs)).sum(0)
    return out, lse


def apply_sink(out: torch.Tensor, lse: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    """Add a sink logit `sink` (per head, last axis of lse) to the softmax denominator:
    `out * e^lse / (e^lse + e^sink) = out * sigmoid(lse - sink)`; rows with lse -inf stay 0."""
    weight = torch.sigmoid(lse - sink)
    weight = torch.where(torch.isfinite(lse), weight, torch.zeros_like(weight))
    return out * weight.unsqueeze(-1)
