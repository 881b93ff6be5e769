"""Launch one dense decode case a few times, for a profiler to pick a launch (nothing is timed here).

    PYTHONPATH=src python3 scripts/ncu_decode.py B,N,H,q[,fp8] [block_m,block_n,warps,stages[,flags]]

Under Nsight Compute, for example:
    ncu --clock-control none -k regex:_mla_decode_kernel --launch-skip 1 --launch-count 1 \\
        --section WarpStateStats python3 scripts/ncu_decode.py 64,4096,16,1,fp8
The case is `benchmarks/decode_probe.py`'s (random data, shuffled table); the optional config is parsed as its
`--config`.
"""

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/benchmarks")
from decode_probe import Case, parse_config


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    spec = sys.argv[1].split(",")
    batch, keys, heads, q_len = (int(x) for x in spec[:4])
    case = Case(batch, keys, heads, q_len, fp8=spec[-1] == "fp8")
    config = parse_config(sys.argv[2]) if len(sys.argv) > 2 else None
    fn = case.run(case.plan(), config)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
