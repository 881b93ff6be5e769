"""Does the decode's gain from keeping its split-KV partials in L2 (stores with evict_last) hold when other memory
traffic runs between two decode calls, as an engine's projections and MLPs do between two layers?

    PYTHONPATH=src python3 benchmarks/experiments/l2_between_calls.py [--case B,N,H] [--traffic-mb 0 16 64 256]

Times CUDA-graph replays of one step = the decode call followed by a device copy moving the given megabytes (read
+ written, half each), minus the same graph's copy alone. Run it once per tree to compare (A/B): the step's
decode time should not depend on which tree runs the copy.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="64,4096,16", help="batch,keys,heads (one query token, bf16)")
    parser.add_argument("--traffic-mb", type=int, nargs="+", default=[0, 16, 64, 256])
    args = parser.parse_args()
    batch, keys, heads = (int(x) for x in args.case.split(","))
    case = Case(batch, keys, heads, 1)
    plan = case.plan()
    decode = case.run(plan, None)
    print(f"case B{batch} N{keys} H{heads}, {case.copies} cache copies, err {case.check(plan, None):.2e}")
    for mb in args.traffic_mb:
        n = max(1, mb * 2**20 // 8)  # float32 elements per buffer: each holds half the bytes moved
        src = torch.randn(n, device="cuda")
        dst = torch.empty_like(src)

        def copy(src=src, dst=dst, mb=mb):
            if mb:
                dst.copy_(src)

        def step(copy=copy):
            decode()
            copy()
        t_step = _time_graph(step) * 1e3
        t_copy = _time_graph(copy) * 1e3 if mb else 0.0
        t_decode = _time_graph(decode) * 1e3
        print(f"traffic {mb:4d} MB: step {t_step:7.1f} us, copy alone {t_copy:6.1f} us, step - copy "
              f"{t_step - t_copy:6.1f} us, decode alone {t_decode:6.1f} us")


if __name__ == "__main__":
    main()
