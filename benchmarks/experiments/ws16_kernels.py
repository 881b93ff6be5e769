"""The two 16-row FP8 decode kernels against each other: `kernels.mla_decode_ws16` (widen warps, "widen") and
`kernels.mla_decode_ws16_rs` (register operands, "registers"), forced in turn through
`ops._triton_decode.WS16_KERNEL`, in one process on the same plans (decode_probe's cases: 16 heads, one token,
FP8, one worker per SM); each line with the first sequence's max error against the float32 reference. This is
how `configs.decode.WS16_RS_MIN_BLOCKS` was set (BENCHMARKS.md, twenty-second session; the drafts it was
measured with, `ws16_rs.py` and `ws16_pp.py`, are in the history at commit 93fa9d4).

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws16_kernels.py 64,4096 128,4096 1,16384 [--repeat 2]
"""

import dataclasses
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode


def main() -> None:
    cases = [a for a in sys.argv[1:] if "," in a] or ["64,4096"]
    repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
    workers = torch.cuda.get_device_properties(0).multi_processor_count
    before = _triton_decode.WS16_KERNEL
    try:
        for text in cases:
            b, n = (int(x) for x in text.split(","))
            case = Case(b, n, 16, 1, fp8=True)
            plan = case.plan(workers)
            for _ in range(repeat):
                for kernel in ("widen", "registers"):
                    _triton_decode.WS16_KERNEL = kernel
                    err = case.check(plan, dataclasses.replace(WS16))
                    us = _time_graph(case.run(plan, dataclasses.replace(WS16))) * 1e3 / case.copies
                    print(f"B{b} N{n} W{workers} {kernel}: {us:.1f} us err {err:.2e}", flush=True)
    finally:
        _triton_decode.WS16_KERNEL = before


if __name__ == "__main__":
    main()
