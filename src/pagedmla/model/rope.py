"""Rotary tables in the layout `fused_qk_rope_ragged` takes, and DeepSeek's softmax scale with YaRN.

`freqs_cis[pos, 2i] = cos(pos * inv_freq[i]) * attention_factor`, `freqs_cis[pos, 2i + 1] = sin(...) *
attention_factor`: one (cos, sin) pair per rotated pair i, whatever the pairing (interleaved or half split).
YaRN follows DeepSeek-V2/V3 (and Hugging Face's `_compute_yarn_parameters`): blended inverse frequencies,
cos/sin scaled by `mscale(factor, mscale) / mscale(factor, mscale_all_dim)`, and the softmax scale multiplied
by `mscale(factor, mscale_all_dim) ** 2`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

__all__ = ["freqs_cis_from_cos_sin", "rope_freqs_cis", "rope_inv_freq", "softmax_scale", "yarn_mscale"]


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature `0.1 * mscale * ln(factor) + 1` (1 when factor <= 1)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _is_yarn(scaling: Mapping | None) -> bool:
    if not scaling:
        return False
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ("default", "yarn"):
        raise ValueError(f"Invalid rope scaling: expected rope_type 'default' or 'yarn', got {kind!r}")
    return kind == "yarn"


def rope_inv_freq(rope_dim: int, theta: float, scaling: Mapping | None = None, *,
                  max_position_embeddings: int | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies float32 `[rope_dim / 2]` and the cos/sin attention factor.

    Args:
        rope_dim: `qk_rope_head_dim` (even).
        theta: rope base (`rope_theta`).
        scaling: None / default, or a YaRN dict with `factor`, `original_max_position_embeddings` and optional
            `beta_fast` (32), `beta_slow` (1), `mscale`, `mscale_all_dim`, `attention_factor`, `truncate` (True).
        max_position_embeddings: only used when a YaRN dict has no `factor`.
    """
    if rope_dim <= 0 or rope_dim % 2:
        raise ValueError(f"Invalid rope_dim: expected an even int > 0, got {rope_dim}")
    exponents = torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim
    pos_freqs = theta ** exponents
    if not _is_yarn(scaling):
        return 1.0 / pos_freqs, 1.0
    original = scaling["original_max_position_embeddings"]
    factor = scaling.get("factor")
    if factor is None:
        factor = max_position_embeddings / original
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            attention_factor = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_mscale(factor)
    beta_fast = scaling.get("beta_fast") or 32
    beta_slow = scaling.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        # The dimension whose wavelength completes `rotations` turns over the original context.
        return rope_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rope_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - keep) + (1.0 / pos_freqs) * keep
    return inv_freq, float(attention_factor)


def rope_freqs_cis(rope_dim: int, max_positions: int, theta: float = 10000.0, scaling: Mapping | None = None, *,
                   max_position_embeddings: int | None = None, device=None) -> torch.Tensor:
    """The rope table float32 `[max_positions, rope_dim]`: cos at `2i`, sin at `2i + 1` of pair i.

    >>> rope_freqs_cis(4, 3).shape
    torch.Size([3, 4])
    """
    inv_freq, attention_factor = rope_inv_freq(rope_dim, theta, scaling,
                                               max_position_embeddings=max_position_embeddings)
    angles = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1) * inv_freq
    table = torch.stack([angles.cos() * attention_factor, angles.sin() * attention_factor], dim=-1).flatten(1)
    return table.to(device) if device is not None else table


def freqs_cis_from_cos_sin(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Our table from Hugging Face's `(cos, sin)` `[max_positions, R]` (`cat(freqs, freqs)` layout)."""
    half = cos.shape[-1] // 2
    return torch.stack([cos[..., :half].float(), sin[..., :half].float()], dim=-1).flatten(-2).contiguous()


def softmax_scale(qk_head_dim: int, scaling: Mapping | None = None) -> float:
    """`qk_head_dim ** -0.5`, times `mscale(factor, mscale_all_dim) ** 2` under YaRN (DeepSeek's correction)."""
    scale = qk_head_dim ** -0.5
    if _is_yarn(scaling):
        mscale_all_dim = scaling.get("mscale_all_dim", 0)
        if mscale_all_dim:
            m = yarn_mscale(scaling["factor"], mscale_all_dim)
            scale *= m * m
    return scale
