"""Test and benchmark support: adversarial paged inputs, comparison helpers (and, with the bench extra,
the GPU timer and FLOP/byte formulas)."""

from .compare import assert_close, assert_close_to_reference, error_report
from .inputs import PagedBatch, adversarial_lengths, make_paged_batch, random_mla_weights

__all__ = [
    "PagedBatch",
    "adversarial_lengths",
    "assert_close",
    "assert_close_to_reference",
    "error_report",
    "make_paged_batch",
    "random_mla_weights",
]
