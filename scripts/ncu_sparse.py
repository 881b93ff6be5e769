"""Launch one sparse decode case a few times, for a profiler to pick a launch (nothing is timed here).

    PYTHONPATH=src python3 scripts/ncu_sparse.py B,q,H,topk[,kind]      # kind: rope (default), bf16, fp8-g64

Under Nsight Compute, for example:
    ncu --clock-control none -k regex:_mla_sparse_decode_ws_kernel --launch-skip 1 --launch-count 1 \\
        --section WarpStateStats python3 scripts/ncu_sparse.py 64,2,128,2048
The case is `benchmarks/sparse_probe.py`'s (random data, shuffled table, 32768 cached tokens per sequence,
random distinct top-k positions per query token, bf16 q), run through the public op.
"""

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/benchmarks")
from sparse_probe import make_case, public_call


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    spec = sys.argv[1].split(",")
    batch, new, heads, topk = (int(x) for x in spec[:4])
    kind = spec[4] if len(spec) > 4 else "rope"
    dev = torch.device("cuda")
    case = make_case("ncu", heads=heads, kind=kind, q_kind="bf16", batch=batch, tokens=32768, new=new, topk=topk,
                     page_size=64, fold=False, gen=torch.Generator(device=dev).manual_seed(0), device=dev)
    out = torch.empty(batch * new, heads, 512, dtype=torch.bfloat16, device=dev)
    fn = public_call(case, out)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
