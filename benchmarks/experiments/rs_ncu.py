"""Run the register-operand 16-row FP8 decode (`kernels.mla_decode_ws16_rs`) a few times outside a graph, for
Nsight Compute to sample its warps' stalls per SASS instruction (16 heads, one token, FP8 rope-aware cache,
causal; the plan's own workers). On the device:

    PYTHONPATH=src:benchmarks ncu --clock-control none -k regex:ws16_rs --launch-skip 3 --launch-count 1 \
        --section SourceCounters --section WarpStateStats -o OUT/rs python3 benchmarks/experiments/rs_ncu.py
    ncu -i OUT/rs.ncu-rep --page source --csv --print-source sass > OUT/rs-source.csv

Written for the twenty-fifth session's question: why consumer 0 widens q 3.5 us slower than consumer 1 (the
`--warp-stamps` timeline of rs_timeline.py: `_q_scale` 0.35 us in consumer 1, 3.6 in consumer 0).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="64,4096", help="B,N")
    parser.add_argument("--calls", type=int, default=6)
    args = parser.parse_args()
    b, n = (int(x) for x in args.case.split(","))
    _triton_decode.WS16_KERNEL = "registers"
    case = Case(b, n, 16, 1, fp8=True)
    case.items = case.items[:1]
    run = case.run(case.plan(), WS16)
    for _ in range(args.calls):
        run()
    torch.cuda.synchronize()
    print(f"B{b} N{n}: {args.calls} calls", flush=True)


if __name__ == "__main__":
    main()
