"""The GPU timer and the ceilings every benchmark run measures for itself.

`time_gpu` warms up, then replays a CUDA graph of many calls (or, when capture fails, records CUDA events
around single calls) and reports the median and the 20th/80th percentiles per call. Inputs whose working set
would stay in L2 are rotated across several copies so every call reads from DRAM, as in a model where each
layer has its own cache.

`measure_ceilings` times a device-to-device copy of a large buffer (bytes read + written; the faster of a
cudaMemcpy and an elementwise kernel) and a bf16 8192^3 `torch.matmul` on random data; a case's roofline fraction is `max(bytes / copy_bw, flops / mm_rate)` divided
by its measured time.

>>> percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.5)
3.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .flops import Cost, copy_cost, matmul_cost

__all__ = [
    "DEFAULT_L2_BYTES",
    "Ceilings",
    "Timing",
    "l2_cache_bytes",
    "measure_ceilings",
    "measure_copy_bandwidth",
    "measure_matmul_rate",
    "percentile",
    "roofline_fraction",
    "rotation_copies",
    "time_gpu",
]

# H200's L2; used when the device properties do not say.
DEFAULT_L2_BYTES = 60 * 1024 * 1024
# One graph replay should run at least this long, so the replay launch and the event records are noise.
_GRAPH_TARGET_MS = 2.0
_MAX_GRAPH_CALLS = 2048


@dataclass(frozen=True)
class Timing:
    """Per-call GPU time of one benchmark.

    Attributes:
        median_us, p20_us, p80_us: percentiles over the samples, microseconds per call.
        samples: timed samples (graph replays or single calls).
        calls_per_sample: calls inside one sample (the graph's length; 1 with events).
        method: "cuda-graph" or "cuda-events".
        copies: input copies rotated through.
        note: why the events fallback was used, if it was.
    """

    median_us: float
    p20_us: float
    p80_us: float
    samples: int
    calls_per_sample: int
    method: str
    copies: int
    note: str = ""


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) with linear interpolation between order statistics."""
    if not values:
        raise ValueError("Invalid values: expected at least one sample, got none")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"Invalid q: expected 0 <= q <= 1, got {q}")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def l2_cache_bytes(device=None) -> int:
    """L2 size of the device from its properties, else DEFAULT_L2_BYTES."""
    if not torch.cuda.is_available():
        return DEFAULT_L2_BYTES
    props = torch.cuda.get_device_properties(torch.device("cuda") if device is None else device)
    size = int(getattr(props, "L2_cache_size", 0) or 0)
    return size if size > 0 else DEFAULT_L2_BYTES


def rotation_copies(working_set_bytes: int, l2_bytes: int, *, max_copies: int = 64) -> int:
    """Input copies to rotate so consecutive calls cannot hit in L2.

    One copy when a call's working set is at least twice L2 (it evicts itself); otherwise enough copies to
    cover three times L2, at most `max_copies`.

    >>> rotation_copies(10 << 20, 60 << 20), rotation_copies(1 << 30, 60 << 20)
    (18, 1)
    """
    if working_set_bytes >= 2 * l2_bytes:
        return 1
    return max(2, min(max_copies, math.ceil(3 * l2_bytes / max(working_set_bytes, 1))))


def _summary(per_call_ms: list[float], calls: int, method: str, copies: int, note: str) -> Timing:
    us = [t * 1e3 for t in per_call_ms]
    return Timing(percentile(us, 0.5), percentile(us, 0.2), percentile(us, 0.8), len(us), calls, method, copies,
                  note)


def _estimate_ms(fns: Sequence[Callable[[], object]], calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fns[i % len(fns)]()
    end.record()
    end.synchronize()
    return max(start.elapsed_time(end) / calls, 1e-4)


def _time_events(fns, est_ms: float, rep_ms: float, min_samples: int, max_samples: int) -> list[float]:
    samples = max(min_samples, min(max_samples, math.ceil(rep_ms / est_ms)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for i in range(samples):
        starts[i].record()
        fns[i % len(fns)]()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _capture(fns, calls: int) -> torch.cuda.CUDAGraph:
    # Libraries (cuBLAS, cuDNN) set up per-stream state on first use: run once on a side stream first.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    error: BaseException | None = None
    # Begin/end by hand (not `torch.cuda.graph`) so a failed capture always ends and the stream is restored,
    # and the first error (not the invalidated capture's) is the one reported.
    with torch.cuda.stream(side):
        graph.capture_begin()
        try:
            for i in range(calls):
                fns[i % len(fns)]()
        except Exception as exc:  # noqa: BLE001 - re-raised below, after the capture has ended
            error = exc
        try:
            graph.capture_end()
        except Exception as exc:  # noqa: BLE001
            error = error or exc
    if error is not None:
        _reset_default_generator()
        raise error
    torch.cuda.synchronize()
    return graph


def _reset_default_generator() -> None:
    """Undo what a failed capture leaves behind in the default CUDA generator.

    `capture_begin` puts that generator in capture mode and only a successful `capture_end` takes it out; after
    a failed capture (torch 2.11 at least) every later `torch.randn` on the device raises "Offset increment
    outside graph capture encountered unexpectedly". A clone of its state is the same seed and offset, idle.
    """
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    if not (hasattr(gen, "clone_state") and hasattr(gen, "graphsafe_set_state")):
        return
    try:
        gen.graphsafe_set_state(gen.clone_state())
    except RuntimeError:
        # The capture error is the one to report; a generator left broken shows up at the next torch.randn.
        pass


def _time_graph(graph, calls: int, est_ms: float, rep_ms: float, min_samples: int, max_samples: int) -> list[float]:
    graph.replay()
    torch.cuda.synchronize()
    samples = max(min_samples, min(max_samples, math.ceil(rep_ms / (est_ms * calls))))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for i in range(samples):
        starts[i].record()
        graph.replay()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / calls for s, e in zip(starts, ends)]


def time_gpu(fns: Callable[[], object] | Sequence[Callable[[], object]], *, warmup_ms: float = 25.0,
             rep_ms: float = 100.0, use_cuda_graph: bool = True, min_samples: int = 10,
             max_samples: int = 1000) -> Timing:
    """Time one GPU operation per call.

    `fns` is one closure per input copy (call i runs `fns[i % len(fns)]`). Every copy runs once first (Triton
    compiles, libraries initialize), then calls run for `warmup_ms`. With `use_cuda_graph`, a graph of enough
    calls to last ~2 ms is captured and replayed, each replay timed by CUDA events; if capture fails (an op
    syncs with the host, or a library refuses capture) single calls are timed between CUDA events instead.
    Samples are taken for about `rep_ms` (at least `min_samples`).

    Args:
        fns: a zero-argument callable, or a list of them (one per rotated input copy).
        warmup_ms: warm-up time after the first calls.
        rep_ms: measuring time.
        use_cuda_graph: try CUDA-graph replay first.
    Returns:
        Timing with median, p20 and p80 in microseconds per call.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("time_gpu needs a CUDA device (torch.cuda.is_available() is False)")
    fns = [fns] if callable(fns) else list(fns)
    if not fns:
        raise ValueError("Invalid fns: expected at least one callable, got none")
    copies = len(fns)
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    est = _estimate_ms(fns, max(copies, 3))
    warm_calls = min(10_000, math.ceil(warmup_ms / est))
    if warm_calls > 0:
        est = _estimate_ms(fns, max(warm_calls, copies))
    note = ""
    if use_cuda_graph:
        calls = max(1, min(_MAX_GRAPH_CALLS, math.ceil(_GRAPH_TARGET_MS / est)))
        # Whole rounds of the copies, so every copy is read equally often.
        calls = math.ceil(calls / copies) * copies
        try:
            graph = _capture(fns, calls)
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to events, with the reason
            torch.cuda.synchronize()
            note = f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
        else:
            per_call = _time_graph(graph, calls, est, rep_ms, min_samples, max_samples)
            del graph
            return _summary(per_call, calls, "cuda-graph", copies, "")
    per_call = _time_events(fns, est, rep_ms, min_samples, max_samples)
    return _summary(per_call, 1, "cuda-events", copies, note)


@dataclass(frozen=True)
class Ceilings:
    """The two ceilings measured in this run: copy bandwidth (bytes read + written per second) and the bf16
    matmul rate (FLOP per second), with the timings they came from."""

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    copy_timing: Timing
    matmul_timing: Timing
    copy_bytes: int
    matmul_size: int
    copy_method: str = "memcpy"

    def roofline_seconds(self, cost: Cost) -> float:
        return cost.roofline_seconds(self.copy_bytes_per_s, self.matmul_flops_per_s)

    def as_dict(self) -> dict:
        return {"copy_tb_per_s": self.copy_bytes_per_s / 1e12, "matmul_tflop_per_s": self.matmul_flops_per_s / 1e12,
                "copy_us": self.copy_timing.median_us, "matmul_us": self.matmul_timing.median_us,
                "copy_buffer_bytes": self.copy_bytes, "copy_method": self.copy_method,
                "matmul_size": self.matmul_size}


def roofline_fraction(cost: Cost, seconds: float, ceilings: Ceilings) -> float:
    """`roofline_time / measured_time`: 1.0 means the case runs at the ceiling that bounds it."""
    return ceilings.roofline_seconds(cost) / seconds


def measure_copy_bandwidth(num_bytes: int = 1 << 30, *, device=None,
                           **timer_kwargs) -> tuple[float, Timing, str]:
    """Bytes moved per second (read + written) copying a `num_bytes` bf16 buffer on the device.

    Two copies are timed and the faster one counts: `dst.copy_(src)` (a cudaMemcpy, which in a CUDA graph may
    run on a copy engine rather than the SMs) and an elementwise kernel that reads and writes the same bytes
    (`torch.neg(src, out=dst)`), which is how a kernel streams memory.

    Returns:
        (bytes per second, the faster timing, "memcpy" or "elementwise").
    """
    device = torch.device("cuda") if device is None else torch.device(device)
    src = torch.randn(num_bytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    moved = copy_cost(src.numel() * src.element_size()).bytes
    best = None
    for method, fn in (("memcpy", lambda: dst.copy_(src)), ("elementwise", lambda: torch.neg(src, out=dst))):
        timing = time_gpu(fn, **timer_kwargs)
        if best is None or timing.median_us < best[1].median_us:
            best = (moved / (timing.median_us * 1e-6), timing, method)
    return best


def measure_matmul_rate(size: int = 8192, *, dtype=torch.bfloat16, device=None,
                        **timer_kwargs) -> tuple[float, Timing]:
    """FLOP per second of `torch.matmul` on random `[size, size]` operands."""
    device = torch.device("cuda") if device is None else torch.device(device)
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    c = torch.empty(size, size, dtype=dtype, device=device)
    timing = time_gpu(lambda: torch.matmul(a, b, out=c), **timer_kwargs)
    return matmul_cost(size, size, size).flops / (timing.median_us * 1e-6), timing


def measure_ceilings(*, copy_bytes: int = 1 << 30, matmul_size: int = 8192, device=None,
                     warmup_ms: float = 100.0, rep_ms: float = 200.0) -> Ceilings:
    """Measure both ceilings (a longer warm-up than the cases, so clocks settle)."""
    kw = {"device": device, "warmup_ms": warmup_ms, "rep_ms": rep_ms}
    copy_bw, copy_t, copy_method = measure_copy_bandwidth(copy_bytes, **kw)
    mm_rate, mm_t = measure_matmul_rate(matmul_size, **kw)
    torch.cuda.empty_cache()
    return Ceilings(copy_bw, mm_rate, copy_t, mm_t, copy_bytes, matmul_size, copy_method)
