"""Two tiers, one suite. Without a GPU, Triton kernels run under the interpreter on CPU tensors: the flag
must be set before anything imports triton, so it is set here, at collection time."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

HAS_CUDA = torch.cuda.is_available()

import triton
import triton.language as tl

from pagedmla.kernels.common import gdc_launch_dependents


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


@triton.jit
def _late_copy_kernel(src, dst, n, spin_ns, BLOCK: tl.constexpr):
    """Copy `src` to `dst` (grid-stride) after letting a next kernel launched as a programmatic dependent be
    scheduled, and after spinning for `spin_ns`: a next kernel that read `dst` without waiting for this one would
    read the old values."""
    gdc_launch_dependents()
    t0 = tl.extra.cuda.globaltimer()
    t = t0
    while t - t0 < spin_ns:
        t = tl.extra.cuda.globaltimer()
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


@pytest.fixture
def late_copy():
    """`late_copy(new, target, call)` (GPU): a kernel lets its programmatic dependents launch, spins for 3 ms (far
    longer than the host takes to launch a warmed-up `call()`), then copies `new` into `target`; `call()` is
    launched right behind it. Kernels of `call` that read before waiting for the kernel before them see the old
    `target`. Afterwards `target` holds `new`'s bytes (checked: NaN slots compare equal)."""
    def run(new, target, call):
        assert new.is_contiguous() and target.is_contiguous() and new.shape == target.shape
        # one-byte types (FP8 caches) copied as bytes
        new, target = (x.view(torch.uint8) if x.element_size() == 1 else x for x in (new, target))
        _late_copy_kernel[(64,)](target, target, 0, 0, BLOCK=1024)  # compiled before the timed part
        torch.cuda.synchronize()
        _late_copy_kernel[(64,)](new, target, target.numel(), 3_000_000, BLOCK=1024)
        call()
        torch.cuda.synchronize()
        assert torch.equal(target.view(torch.uint8), new.view(torch.uint8))
    return run
