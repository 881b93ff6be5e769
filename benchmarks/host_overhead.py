"""Probe: host (CPU) time per call of the ops, the part a CUDA graph removes and an eager engine pays.

    PYTHONPATH=src python3 benchmarks/host_overhead.py [--profile]

Each op runs 100 times back to back without synchronizing, on inputs small enough that the GPU finishes each call
before the host issues the next, so the time per call is the host's; seven rounds over all cases, minimum and
median reported. torch.mm and an empty Triton kernel with
23 arguments give the floors. `--profile` adds cProfile's top entries for the public
k_matmul call. Not a harness: device times come from `pagedmla.cli bench` and the other probes.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
import triton
import triton.language as tl

import pagedmla as pm
from pagedmla.configs.cache_write import matmul_to_cache_heuristic
from pagedmla.ops import _triton_cache_write as tcw
from pagedmla.testing import make_paged_batch


@triton.jit
def _empty_kernel(a0, a1, a2, a3, a4, a5, a6, a7, a8, i0, i1, i2, i3, i4, i5, i6, i7, i8, i9, i10, i11, i12, i13,
                  C0: tl.constexpr, C1: tl.constexpr):
    pass


# the same launcher behind an op registered with torch.library.custom_op (the package's registration before it
# moved to a torch.library.Library, which `torch.ops.pagedmla` times)
@torch.library.custom_op("pagedmla_probe::k_matmul", mutates_args=("blocks",))
def _custom_op_k_matmul(x: torch.Tensor, offsets: torch.Tensor, w: torch.Tensor, blocks: torch.Tensor,
                        lengths: torch.Tensor, table: torch.Tensor, layer: int) -> None:
    tcw.k_matmul_ragged_paged(x, offsets, w, blocks, lengths, table, layer)


def host_us(fn, calls: int = 100) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    dev = "cuda"
    pb = make_paged_batch([100, 37, 0, 64], [3, 1, 2, 1], head_size=576, page_size=64, num_layers=1,
                          dtype=torch.bfloat16, device=dev)
    kv, iro = pb.kv, pb.input_row_offsets
    rows = pb.num_rows
    x = torch.randn(rows, 7168, device=dev, dtype=torch.bfloat16)
    w = torch.randn(576, 7168, device=dev, dtype=torch.bfloat16) / 84.7
    gamma = torch.ones(512, device=dev, dtype=torch.bfloat16)
    q_rope = torch.randn(rows, 16, 64, device=dev, dtype=torch.bfloat16)
    freqs = torch.randn(256, 64, device=dev)
    q = torch.randn(rows, 16, 576, device=dev, dtype=torch.bfloat16)
    plan = pm.mla_decode_plan(iro, kv, num_heads=16)
    ptrs = [torch.empty(16, device=dev) for _ in range(9)]
    cases = {
        "torch.mm (floor)": lambda: torch.mm(x, w.t()),
        "empty triton kernel, 23 args": lambda: _empty_kernel[(1,)](*ptrs, *range(1, 15), C0=1, C1=2),
        "k_matmul_ragged_paged (public)": lambda: pm.k_matmul_ragged_paged(x, iro, w, kv, 0),
        "k_matmul launcher (direct)": lambda: tcw.k_matmul_ragged_paged(x, iro, w, kv.blocks, kv.cache_lengths,
                                                                        kv.lookup_table, 0),
        "rms_norm_key_cache (public)": lambda: pm.rms_norm_key_cache(kv, gamma, 1e-6, 0, iro),
        "fused_qk_rope_ragged (public)": lambda: pm.fused_qk_rope_ragged(q_rope, iro, kv, freqs, 0),
        "mla_decode_plan (public)": lambda: pm.mla_decode_plan(iro, kv, num_heads=16),
        "mla_decode_kv_cache_ragged (public)": lambda: pm.mla_decode_kv_cache_ragged(q, iro, kv, 0, 0.1, plan=plan),
    }
    cfg = matmul_to_cache_heuristic(rows, 576, 7168, num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    cases["k_matmul launcher, config given"] = lambda: tcw.k_matmul_ragged_paged(
        x, iro, w, kv.blocks, kv.cache_lengths, kv.lookup_table, 0, cfg)
    cases["k_matmul Library op (torch.ops.pagedmla, no checks)"] = lambda: torch.ops.pagedmla.k_matmul_ragged_paged(
        x, iro, w, kv.blocks, kv.cache_lengths, kv.lookup_table, 0, "triton")
    cases["k_matmul as a custom_op (no checks)"] = lambda: torch.ops.pagedmla_probe.k_matmul(
        x, iro, w, kv.blocks, kv.cache_lengths, kv.lookup_table, 0)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for name, fn in list(cases.items()):  # compile and warm up; drop what fails
        try:
            for _ in range(5):
                fn()
        except Exception as exc:  # noqa: BLE001 - a probe: report the case and go on
            print(f"host {name:<52} failed: {exc!r}"[:300], flush=True)
            del cases[name]
    # rounds over all cases, so that a slow spell of the machine hits every case alike; the minimum is reported
    for _ in range(7):
        for name, fn in cases.items():
            times[name].append(host_us(fn))
    for name in cases:
        ts = sorted(times[name])
        print(f"host {name:<52} min {ts[0]:7.1f} us  median {ts[len(ts) // 2]:7.1f} us per call", flush=True)
    if args.profile:
        prof = cProfile.Profile()
        fn = cases["k_matmul_ragged_paged (public)"]
        prof.enable()
        for _ in range(200):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
