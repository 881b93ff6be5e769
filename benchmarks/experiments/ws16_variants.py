"""Times the 16-row warp-specialized FP8 decode (`pagedmla.kernels.mla_decode_ws16`) in variants of its
launcher's constants against the shipped path (the default plan and config: the ring kernel at big batches), on
decode_probe's cases (16 heads, one query token, page 64, random data, CUDA-graph replays), in one process.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws16_variants.py --case 64,4096 --case 1,16384 \
        --variant slots=3,widen_warps=4 --variant slots=3,widen_warps=8,widen_regs=80 [--workers 132]

Each line: the case, the variant (or `shipped` / `bf16 shipped`), microseconds per call, TB/s on the bytes read
(cache rows + q + out), the max abs error of the first sequence against the float32 reference.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from decode_probe import Case, _time_graph, copy_ceiling

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode

KNOBS = {"slots": "WS16_SLOTS", "widen_warps": "WS16_WIDEN_WARPS", "widen_regs": "WS16_WIDEN_REGS",
         "loader_regs": "WS16_LOADER_REGS"}


def _timed(case: Case, plan, config, label: str) -> None:
    err = case.check(plan, config)
    us = _time_graph(case.run(plan, config)) * 1e3 / case.copies
    print(f"B{case.batch} N{case.keys} {'fp8' if case.fp8 else 'bf16'} W{plan.num_partitions} {label}: {us:.1f} us "
          f"{case.bytes / us / 1e6:.2f} TB/s err {err:.2e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N (16 heads, one token)")
    parser.add_argument("--variant", action="append", default=[],
                        help="knob=value,... (knobs: " + ", ".join(KNOBS) + ")")
    parser.add_argument("--workers", type=int, default=0, help="workers of the ws16 schedule (0: the SM count)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the variants")
    args = parser.parse_args()
    print(f"# copy {max(copy_ceiling().values()) / 1e12:.2f} TB/s", flush=True)
    defaults = {k: getattr(_triton_decode, v) for k, v in KNOBS.items()}
    workers = args.workers or torch.cuda.get_device_properties(0).multi_processor_count
    for text in args.case or ["64,4096"]:
        b, n = (int(x) for x in text.split(","))
        fp8 = Case(b, n, 16, 1, fp8=True)
        bf16 = Case(b, n, 16, 1)
        _timed(bf16, bf16.plan(), None, "bf16 shipped")
        plan = fp8.plan(workers)
        for _ in range(args.repeat):
            _timed(fp8, fp8.plan(), None, "shipped")
            for variant in args.variant or ["default"]:
                knobs = dict(defaults)
                for item in variant.split(","):
                    if "=" in item:
                        key, value = item.split("=")
                        knobs[key] = int(value)
                for key, value in knobs.items():
                    setattr(_triton_decode, KNOBS[key], value)
                try:
                    _timed(fp8, plan, dataclasses.replace(WS16), "ws16 " + variant)
                except Exception as exc:  # noqa: BLE001 (a variant that does not compile or fit is reported)
                    print(f"B{b} N{n} ws16 {variant}: failed {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                finally:  # the shipped lines run with the launcher's own constants
                    for key, value in defaults.items():
                        setattr(_triton_decode, KNOBS[key], value)
        del fp8, bf16
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
