"""A small driver for `compute-sanitizer` over the register-operand 16-row FP8 decode
(`kernels.mla_decode_ws16_rs`, forced through `ops._triton_decode.WS16_KERNEL`): decode_probe's cases in the order
in which `rs_ablate.py` once stopped with "unspecified launch failure" (B64 then B128 N4096, 132 workers; see
BENCHMARKS.md, twenty-third session), each called a few times directly and then through a captured CUDA graph,
with a synchronize and the first sequence's error after each step.

    PYTHONPATH=src:benchmarks compute-sanitizer --tool memcheck python3 benchmarks/experiments/rs_memcheck.py
"""

import dataclasses
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode


def main() -> None:
    cases = [a for a in sys.argv[1:] if "," in a] or ["64,4096", "128,4096"]
    workers = torch.cuda.get_device_properties(0).multi_processor_count
    _triton_decode.WS16_KERNEL = "registers"
    for text in cases:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        plan = case.plan(workers)
        fn = case.run(plan, dataclasses.replace(WS16))
        for _ in range(3):
            fn()
            torch.cuda.synchronize()
        err = case.check(plan, dataclasses.replace(WS16))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        print(f"B{b} N{n} W{workers}: direct and graph calls done, err {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
