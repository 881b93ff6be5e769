"""What the register-operand 16-row FP8 decode's call costs around the kernel (`kernels.mla_decode_ws16_rs`): the
combine kernel after it and the launches between the two, at the plan's own workers.

Variants, each a CUDA graph of back-to-back calls (decode_probe's cases: 16 heads, one token, FP8 rope-aware
cache, causal):
- combine `shipped`: `_mla_decode_combine_kernel` as it is (waits, then lets the next kernel launch);
  `first`: a patched copy that lets the next kernel launch before its own wait; `none`: no combine at all (the
  outputs of split sequences are then wrong: a bound, not a kernel);
- `--combine-rows R ...`: the shipped combine with R rows a program (`CombineConfig.block_r`; the heuristic's 4
  gives a grid of 4 programs a sequence at 16 heads, 16 gives one): whether the combine's cost, measured at
  about 3.5 us a call even where no sequence is split (B128 at 128 workers), follows its grid (it does not: 16
  rows were slower, benchmarks/results/session-25/rs-tail-3a6f2db.txt);
- `--workers W ...`: the shipped combine on plans of W workers instead of the heuristic's (which rounds B64's
  132 to 128 so that each sequence falls into two whole pieces): at 169f9bf B64 N4096 took 56.4-58.5 us at 128,
  62.4-62.8 at 130 and 58.4-58.6 at 132 (benchmarks/results/session-26/rs-tail-workers-169f9bf.txt).
Cases B,N,H at other head counts run the bf16 cache and the launcher's kernel (128 heads B1 N16384 at 169f9bf:
25.5-25.9 us with the combine, 21.0-21.1 without; at 65451be 23.0 / 23.5 with it, 18.9 without, and with 62 /
63 / 64 workers instead of 66 (a combine tile of 64 pieces for 63) 24.8-25.1 / 24.5-24.9 us; N4096 14.6 with
33 workers, 11.7 without the combine, 15.6-17.0 at 31-64 workers: benchmarks/results/session-27/).
At 5810b42 the script also had the decode let the next kernel launch once its programs passed their wait
(`griddepcontrol.launch_dependents`, a flag since removed): B64 N4096 58.5 / 58.9 us without it, 60.0 / 60.6
with it (benchmarks/results/session-24/rs-tail-5810b42.txt). In the twenty-fifth session it also timed two
designs of a merge inside the kernel (the last worker of a split sequence merging it, no combine launched), at
3a6f2db and 6fdd4c1: each saved the combine's ~3 us where nothing was split (B128 N4096) and lost 1-2 us to it
where every sequence was split in two (B64 N4096), so neither was kept (BENCHMARKS.md, twenty-fifth session).

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/rs_tail.py --case 64,4096 --case 128,4096 [--repeat 2]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched

from pagedmla.configs.decode import WS16, CombineConfig
from pagedmla.ops import _triton_decode

COMBINE_WAIT = """        gdc_wait()
        # the next kernel, if launched the same way, may be scheduled (it waits for this one's end)
        gdc_launch_dependents()
"""
COMBINE_FIRST = """        gdc_launch_dependents()
        gdc_wait()
"""


def _combine_first():
    import pagedmla.kernels.mla_decode as md
    patch = SourcePatch(pathlib.Path(md.__file__).read_text())
    for rel in ("common", "fp8"):
        patch.sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    patch.sub(COMBINE_WAIT, COMBINE_FIRST)
    return load_patched("rs_tail_combine_first", patch.src)._mla_decode_combine_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[],
                        help="B,N[,H]: one token; 16 heads (default) on the FP8 cache and the register kernel, "
                             "other head counts on the bf16 cache and the kernel the launcher picks")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--combine-rows", type=int, nargs="*", default=[])
    parser.add_argument("--workers", type=int, nargs="*", default=[],
                        help="time the shipped combine on plans of these worker counts too")
    args = parser.parse_args()
    combines = {"shipped": _triton_decode._mla_decode_combine_kernel, "first": _combine_first()}
    launch_combine = _triton_decode._launch_combine
    saved = _triton_decode.WS16_KERNEL
    _triton_decode.WS16_KERNEL = "registers"
    try:
        for text in args.case or ["64,4096"]:
            b, n, *rest = text.split(",")
            b, n, heads = int(b), int(n), int(rest[0]) if rest else 16
            fp8 = heads == 16  # other head counts: the bf16 cache and the launcher's own kernel
            case = Case(b, n, heads, 1, fp8=fp8)
            config = WS16 if fp8 else None
            plan = case.plan()
            for _ in range(args.repeat):
                for combine in ("shipped", "first", "none"):
                    if combine == "none":
                        _triton_decode._launch_combine = lambda *a, **k: None
                    else:
                        _triton_decode._mla_decode_combine_kernel = combines[combine]
                    try:
                        us = _time_graph(case.run(plan, config)) * 1e3 / case.copies
                    finally:
                        _triton_decode._launch_combine = launch_combine
                        _triton_decode._mla_decode_combine_kernel = combines["shipped"]
                    print(f"H{heads} B{b} N{n} W{plan.num_partitions} combine={combine}: {us:.1f} us", flush=True)
                for workers in args.workers:
                    other = case.plan(workers)
                    us = _time_graph(case.run(other, config)) * 1e3 / case.copies
                    print(f"H{heads} B{b} N{n} W{other.num_partitions} (asked {workers}) combine=shipped: {us:.1f} us",
                          flush=True)
                for rows in args.combine_rows:
                    ccfg = CombineConfig(block_p=2, block_r=rows, block_dv=512, num_warps=4)
                    us = _time_graph(case.run(plan, config, ccfg)) * 1e3 / case.copies
                    print(f"H{heads} B{b} N{n} W{plan.num_partitions} combine rows={rows}: {us:.1f} us", flush=True)
    finally:
        _triton_decode.WS16_KERNEL = saved


if __name__ == "__main__":
    main()
