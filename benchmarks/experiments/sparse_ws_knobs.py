"""Experiment: which part of the Gluon sparse decode's time is copies, widening or index loads (diagnostic knobs
that skip them; the outputs are then wrong, only the times count). V3.2 shape: B64, 2 tokens, 128 heads, topk
2048, rope-aware FP8, bf16 q.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/sparse_ws_knobs.py
"""

import torch

from pagedmla.ops._triton_sparse_decode import _launch_sparse_ws
from pagedmla.testing import perf
from sparse_probe import make_case

gen = torch.Generator(device="cuda").manual_seed(0)
c = make_case("v32", heads=128, kind="rope", q_kind="bf16", batch=64, tokens=8192, new=2, topk=2048, page_size=64,
              fold=False, gen=gen, device=torch.device("cuda"))
kv = c["kv"]
out = torch.empty(c["q"].shape[0], 128, 512, device="cuda", dtype=torch.bfloat16)
lse = torch.empty(c["q"].shape[0], 128, device="cuda")
flops = 2 * 128 * 128 * 2048 * (576 + 512)
for knobs, name in [(0, "all"), (1, "no copies"), (2, "no widening"), (3, "no copies, no widening"),
                    (4, "no index loads"), (7, "none of the three"), (0, "all (again)")]:
    fn = lambda k=knobs: _launch_sparse_ws(c["q"], c["iro"], kv.blocks, kv.scales, 0, c["scale"], out, lse, lse,  # noqa: E731
                                          c["idx"], c["lengths"], knobs=k)
    t = perf.time_gpu(fn, warmup_ms=10, rep_ms=40)
    print(f"{name:26s} {t.median_us:8.1f} us  {flops / t.median_us / 1e6:6.1f} TFLOP/s", flush=True)
