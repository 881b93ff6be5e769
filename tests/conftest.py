"""Two tiers, one suite. Without a GPU, Triton kernels run under the interpreter on CPU tensors: the flag
must be set before anything imports triton, so it is set here, at collection time."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (gpu tier)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return torch.device("cuda" if HAS_CUDA else "cpu")


@pytest.fixture
def call_counter(monkeypatch):
    """`count(owner, name)` wraps `owner.name` for the test and returns a one-element list counting its calls
    (e.g. a launcher's: a dispatch regression that silently stops using a kernel fails the count)."""
    def count(owner, name: str) -> list[int]:
        calls = [0]
        fn = getattr(owner, name)

        def counted(*args, **kwargs):
            calls[0] += 1
            return fn(*args, **kwargs)
        monkeypatch.setattr(owner, name, counted)
        return calls
    return count
