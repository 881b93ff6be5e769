"""Smoke test of Triton's Hopper warp specialization, one case per process (a hang must not stop the others).

    PYTHONPATH=src python3 benchmarks/experiments/ws_smoke.py            # runs every case with a timeout
    PYTHONPATH=src python3 benchmarks/experiments/ws_smoke.py CASE       # one case

Case `plain`: a minimal TMA matmul, its K loop at the top level with `warp_specialize=True`, a plain store;
checked against float32 and timed. On the H200 with Triton 3.6 it hung (BENCHMARKS.md, seventh session), as did
the package's k_matmul with warp-specialized main tiles (`kmatmul`, `kmatmul-split` in
`benchmarks/results/session-7/ws-smoke-317c7ea.txt`; that launch was reverted, so only `plain` remains here).
"""

from __future__ import annotations

import subprocess
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _plain_kernel(a_desc, b_desc, c_ptr, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    pm = pid // tl.cdiv(N, BN)
    pn = pid % tl.cdiv(N, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=True):
        acc = tl.dot(a_desc.load([pm * BM, k]), b_desc.load([pn * BN, k]).T, acc)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))


def run(case: str) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    from pagedmla.testing.perf import time_gpu

    torch.manual_seed(0)
    m, n, k = 4096, 512, 7168
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(576, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
    want = x.float() @ w.float().T
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    a_d = TensorDescriptor.from_tensor(x, [128, 64])
    b_d = TensorDescriptor.from_tensor(w, [128, 64])

    def fn():
        _plain_kernel[(m // 128 * n // 128,)](a_d, b_d, c, n, k, BM=128, BN=128, BK=64, num_warps=4, num_stages=4)
    fn()
    torch.cuda.synchronize()
    err = float((c.float() - want[:, :n]).abs().max())
    t = time_gpu(fn, use_cuda_graph=True)
    mm = time_gpu(lambda: torch.mm(x, w.t()), use_cuda_graph=True)
    print(f"{case}: max err {err:.3g}, {t.median_us:.1f} us; torch.mm 4096x7168->576 {mm.median_us:.1f} us",
          flush=True)


def main() -> None:
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    for case in ("plain",):
        try:
            res = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=60,
                                 check=False)
            print(res.stdout.strip() or f"{case}: rc {res.returncode} {res.stderr.strip()[-300:]}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{case}: TIMEOUT (60 s: hung)", flush=True)


if __name__ == "__main__":
    main()
