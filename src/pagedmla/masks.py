"""Attention masks by name: one rule, shared by the reference and the kernels (which use the code).

Positions are absolute: query `q = L_b + s`, key `k = j`, `W = local_window_size`, `N = N_b` keys.

| mask | key visible iff |
| --- | --- |
| null | k < N |
| causal | k <= q |
| sliding_window_causal | k <= q and q - k < W |
| sliding_window_noncausal | q - k < W and k < N |
| chunked | q // W == k // W and k < N |
| chunked_causal | k <= q and q // W == k // W |
"""

from __future__ import annotations

import torch

MASK_CODES = {
    "null": 0,
    "causal": 1,
    "sliding_window_causal": 2,
    "sliding_window_noncausal": 3,
    "chunked": 4,
    "chunked_causal": 5,
}
WINDOWED = frozenset({"sliding_window_causal", "sliding_window_noncausal", "chunked", "chunked_causal"})


def mask_code(mask: str, local_window_size: int) -> tuple[int, int]:
    """Validate a mask name and window; return (code, window). Non-windowed masks get window 0."""
    if not isinstance(mask, str) or mask not in MASK_CODES:
        raise ValueError(f"Invalid mask: expected one of {list(MASK_CODES)}, got {mask!r}")
    if mask in WINDOWED:
        if isinstance(local_window_size, bool) or not isinstance(local_window_size, int) or local_window_size <= 0:
            raise ValueError(f"Invalid local_window_size: expected an int > 0 for mask {mask!r}, got {local_window_size!r}")
        return MASK_CODES[mask], local_window_size
    return MASK_CODES[mask], 0


def visible(q_pos: torch.Tensor, k_pos: torch.Tensor, num_keys, code: int, window: int) -> torch.Tensor:
    """Boolean visibility of key positions to query positions (broadcasting), per the table above."""
    # The ones only broadcast the result to (queries x keys).
    ok = (k_pos < num_keys) & torch.ones_like(q_pos, dtype=torch.bool)
    if code in (1, 2, 5):
        ok = ok & (k_pos <= q_pos)
    if code in (2, 3):
        ok = ok & (q_pos - k_pos < window)
    if code in (4, 5):
        ok = ok & (torch.div(q_pos, window, rounding_mode="floor") == torch.div(k_pos, window, rounding_mode="floor"))
    return ok
