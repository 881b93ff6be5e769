"""Repeat the harness's FP8 16-head decode cases (B64 then B128, N4096: new inputs, a warm-up and a CUDA graph of
calls each time, as `pagedmla bench` runs them) in one process until one fails: a hunt for the rare
"unspecified launch failure" seen in `bench decode --kv-dtype fp8` (twenty-fourth session, call 2). Run it with
CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 to get a GPU core dump of the failing kernel.

    PYTHONPATH=src python3 benchmarks/experiments/fp8_crash_loop.py --iters 40 [--batch 64 128]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from pagedmla import bench
from pagedmla.testing import perf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--batch", nargs="+", default=["64", "128"])
    parser.add_argument("--ms", type=float, default=20.0, help="warm-up and timing milliseconds per case")
    args = parser.parse_args()
    bargs = bench.build_parser().parse_args(["decode", "--heads", "16", "--batch", *args.batch, "--keys", "4096",
                                             "--kv-dtype", "fp8", "--no-reference"])
    device = torch.device("cuda")
    cases = bench.select_cases(bargs)
    ceilings = perf.measure_ceilings(device=device)
    l2 = perf.l2_cache_bytes(device)
    start = time.time()
    for it in range(args.iters):
        for case in cases:
            for spec in bench.case_specs(case, device, baselines=False, reference=False):
                try:
                    row = bench.run_spec(case, spec, ceilings, l2_bytes=l2, warmup_ms=args.ms, rep_ms=args.ms,
                                         use_cuda_graph=True)
                except Exception as exc:  # noqa: BLE001 - the hunt's result
                    print(f"iter {it} {case.name}: raised {type(exc).__name__}: {str(exc).splitlines()[0]}")
                    return 1
                print(f"iter {it} {case.name}: {row['status']} {row['median_us']} {row['note']}", flush=True)
                if row["status"] != "ok":
                    return 1
    print(f"{args.iters} iterations, no failure, {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
