"""Every mask against a brute-force matrix written straight from the table in SPEC section 0."""

import pytest
import torch

from pagedmla.masks import MASK_CODES, mask_code, visible


def brute_force(mask: str, q: int, k: int, n: int, w: int) -> bool:
    rule = {
        "null": k < n,
        "causal": k <= q,
        "sliding_window_causal": k <= q and q - k < w,
        "sliding_window_noncausal": q - k < w and k < n,
        "chunked": q // w == k // w and k < n,
        "chunked_causal": k <= q and q // w == k // w,
    }
    return rule[mask]


@pytest.mark.parametrize("mask", list(MASK_CODES))
@pytest.mark.parametrize("window", [1, 3, 8])
def test_visible_matches_table(mask, window):
    n = 13
    code, w = mask_code(mask, window)
    q = torch.arange(n).view(-1, 1)
    k = torch.arange(n + 4).view(1, -1)
    got = visible(q, k, n, code, w)
    want = torch.tensor([[brute_force(mask, qi, kj, n, window) and kj < n for kj in range(n + 4)] for qi in range(n)])
    assert torch.equal(got, want)


def test_unwindowed_masks_ignore_window():
    assert mask_code("causal", -1) == (1, 0)
    assert mask_code("null", 0) == (0, 0)


@pytest.mark.parametrize("bad", ["Causal", "", "window", None])
def test_unknown_mask_is_value_error(bad):
    with pytest.raises(ValueError, match="Invalid mask"):
        mask_code(bad, 4)


@pytest.mark.parametrize("mask", ["sliding_window_causal", "sliding_window_noncausal", "chunked", "chunked_causal"])
@pytest.mark.parametrize("window", [0, -1, 2.5])
def test_windowed_mask_needs_positive_window(mask, window):
    with pytest.raises(ValueError, match="local_window_size"):
        mask_code(mask, window)
