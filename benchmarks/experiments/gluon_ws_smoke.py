"""Smoke test of Gluon's explicit warp specialization (`gl.warp_specialize`) on Hopper, one case per process.

Triton's automatic warp specialization (`tl.range(..., warp_specialize=True)`, `ws_smoke.py`) compiles for the
H200 but hangs there with Triton 3.6. These cases ask whether Gluon's hand-written partitions run instead:

    PYTHONPATH=src python3 benchmarks/experiments/gluon_ws_smoke.py                  # every case, 60 s timeout each
    PYTHONPATH=src python3 benchmarks/experiments/gluon_ws_smoke.py CASE             # one case, in this process
    PYTHONPATH=src python3 benchmarks/experiments/gluon_ws_smoke.py --compile-only   # sm_90a offline, no GPU

Cases (each prints `name: ok, max err X, T us`, `name: TIMEOUT`, or `name: rc N <stderr tail>`):

* `ws-plain`: the smallest warp-specialized kernel. A 4-warp default partition and a 1-warp worker (24 registers)
  each write their own int32 vector with plain pointer stores; no mbarriers, no TMA, no MMA. A hang here means
  `warp_specialize` itself (the partition dispatch / setmaxnreg) hangs.
* `ws-tma-mma`: bf16 C[M,N] = A[M,K] @ B[N,K]^T (4096 x 512 x 7168, 128x128x64 tiles, fp32 accumulate). A 1-warp
  loader partition fills a STAGES-deep shared-memory ring by TMA (mbarrier "ready" with expect-tx, "empty" to wait
  for a free stage); the 4-warp default partition (one warpgroup) waits on "ready", runs async wgmma, keeps one
  wgmma in flight and arrives on "empty" of the stage whose wgmma has retired, then stores C by TMA.
* `no-ws-tma-mma`: the same GEMM in one partition (software-pipelined TMA ring with "ready" barriers, async wgmma):
  if only `ws-tma-mma` hangs, warp specialization is to blame, not the TMA / mbarrier / wgmma code.

The GEMMs are checked against float32 torch and timed with CUDA-graph replay next to torch.mm.
`--compile-only` compiles every case for sm_90a (GPUTarget cuda 90) on a machine without a GPU and prints ptxas's
register / shared-memory report and counts of the PTX instructions the cases are about.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CASES = ("ws-plain", "ws-tma-mma", "no-ws-tma-mma")
TIMEOUT_S = 60

GEMM_M, GEMM_N, GEMM_K = 4096, 512, 7168
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
STAGES = 4  # 4 x (16 + 16) KiB ring + 32 KiB C tile = 160 KiB of shared memory
LOADER_REGS = 24  # the minimum setmaxnreg allows; the loader holds only scalars
PLAIN_BLOCK = 256
PLAIN_GRID = 264  # two waves over the 132 SMs (one CTA per SM: the kernel takes the whole register file)


# ---------------------------------------------------------------------------------------------------- ws-plain


@gluon.jit
def _plain_default(out_ptr, pid, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout)
    gl.store(out_ptr + offs, pid * 100000 + offs)


@gluon.jit
def _plain_worker(out_ptr, pid, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout)
    gl.store(out_ptr + BLOCK + offs, -(pid * 100000 + offs) - 1)


@gluon.jit
def _ws_plain_kernel(out_ptr, BLOCK: gl.constexpr, WORKER_REGS: gl.constexpr):
    """out[pid, 0, j] = pid * 1e5 + j from the default partition; out[pid, 1, j] = -(that) - 1 from the worker."""
    pid = gl.program_id(0)
    base = out_ptr + pid * (2 * BLOCK)
    gl.warp_specialize([
        (_plain_default, (base, pid, BLOCK)),
        (_plain_worker, (base, pid, BLOCK)),
    ], [1], [WORKER_REGS])


# ---------------------------------------------------------------------------------------------------- GEMM parts


@gluon.constexpr_function
def _acc_layout(num_warps, block_n):
    """wgmma accumulator layout: warps stacked along M (16 rows each per instruction), one instruction spans N."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, block_n, 16])


@gluon.jit
def _init_ring(ready, empty, NUM_STAGES: gl.constexpr, WITH_EMPTY: gl.constexpr):
    for s in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(s), count=1)
        if WITH_EMPTY:
            mbarrier.init(empty.index(s), count=1)
    # Make the initialized barriers visible to the async proxy (TMA complete-tx) before first use.
    fence_async_shared()


@gluon.jit
def _store_c(acc, c_desc, c_smem, off_m, off_n):
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def _gemm_loader(a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, k_tiles):
    """Worker (1 warp): for K tile i, wait until stage i % S is free, then TMA A and B into it."""
    NUM_STAGES: gl.constexpr = a_bufs.type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    for i in range(k_tiles):
        s = i % NUM_STAGES
        phase = (i // NUM_STAGES) & 1
        # A fresh mbarrier sits in phase 0; waiting for parity 1 (the "previous" phase) returns at once, so the
        # first NUM_STAGES waits pass and the (i // S)-th refill of a stage waits for the consumer's (i // S)-th
        # arrival on its "empty" barrier.
        mbarrier.wait(empty.index(s), phase ^ 1)
        bar = ready.index(s)
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], bar, a_bufs.index(s))
        tma.async_copy_global_to_shared(b_desc, [off_n, i * BK], bar, b_bufs.index(s))


@gluon.jit
def _gemm_mma(a_bufs, b_bufs, ready, empty, c_desc, c_smem, off_m, off_n, k_tiles):
    """Default partition (one warpgroup): wgmma over the ring, releasing each stage once its wgmma retired."""
    NUM_STAGES: gl.constexpr = a_bufs.type.shape[0]
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    acc = gl.zeros([BM, BN], gl.float32, _acc_layout(gl.num_warps(), BN))
    for i in range(k_tiles):
        s = i % NUM_STAGES
        mbarrier.wait(ready.index(s), (i // NUM_STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
        # At most the wgmma just issued stays in flight, so the one of K tile i - 1 has read its stage: free it.
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        mbarrier.arrive(empty.index((i + NUM_STAGES - 1) % NUM_STAGES), pred=i > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _store_c(acc, c_desc, c_smem, off_m, off_n)


@gluon.jit
def _ws_gemm_kernel(a_desc, b_desc, c_desc, K, NUM_STAGES: gl.constexpr, LOADER_NREG: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    k_tiles = gl.cdiv(K, BK)

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    _init_ring(ready, empty, NUM_STAGES, True)

    gl.warp_specialize([
        (_gemm_mma, (a_bufs, b_bufs, ready, empty, c_desc, c_smem, off_m, off_n, k_tiles)),
        (_gemm_loader, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, k_tiles)),
    ], [1], [LOADER_NREG])


@gluon.jit
def _issue_tile(a_desc, b_desc, a_bufs, b_bufs, ready, off_m, off_n, i, NUM_STAGES: gl.constexpr):
    BK: gl.constexpr = a_desc.block_type.shape[1]
    s = i % NUM_STAGES
    bar = ready.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], bar, a_bufs.index(s))
    tma.async_copy_global_to_shared(b_desc, [off_n, i * BK], bar, b_bufs.index(s))


@gluon.jit
def _gemm_kernel(a_desc, b_desc, c_desc, K, NUM_STAGES: gl.constexpr):
    """One partition: NUM_STAGES - 1 tiles in flight; tile i + S - 1 refills the stage of tile i - 1, whose wgmma
    has retired once at most one (tile i's) is outstanding."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    k_tiles = gl.cdiv(K, BK)

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    _init_ring(ready, ready, NUM_STAGES, False)

    for i in gl.static_range(NUM_STAGES - 1):  # assumes k_tiles >= NUM_STAGES - 1
        _issue_tile(a_desc, b_desc, a_bufs, b_bufs, ready, off_m, off_n, i, NUM_STAGES)
    acc = gl.zeros([BM, BN], gl.float32, _acc_layout(gl.num_warps(), BN))
    for i in range(k_tiles):
        s = i % NUM_STAGES
        mbarrier.wait(ready.index(s), (i // NUM_STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        if i + NUM_STAGES - 1 < k_tiles:
            _issue_tile(a_desc, b_desc, a_bufs, b_bufs, ready, off_m, off_n, i + NUM_STAGES - 1, NUM_STAGES)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    _store_c(acc, c_desc, c_smem, off_m, off_n)


# ---------------------------------------------------------------------------------------------------- launches


def _spec(case: str, device: str):
    """(kernel, grid, args, constexprs, options, inputs) of a case; `inputs` feed its check."""
    if case == "ws-plain":
        out = torch.zeros(PLAIN_GRID, 2, PLAIN_BLOCK, dtype=torch.int32, device=device)
        return (_ws_plain_kernel, (PLAIN_GRID,), (out,), {"BLOCK": PLAIN_BLOCK, "WORKER_REGS": LOADER_REGS},
                {"num_warps": 4}, {"out": out})
    if case not in ("ws-tma-mma", "no-ws-tma-mma"):
        raise ValueError(f"Invalid case: expected one of {CASES}, got {case!r}")
    if device == "cpu":  # compile only: shapes, dtypes and alignment matter, values do not
        a = torch.empty(GEMM_M, GEMM_K, dtype=torch.bfloat16)
        b = torch.empty(GEMM_N, GEMM_K, dtype=torch.bfloat16)
    else:
        torch.manual_seed(0)
        a = torch.randn(GEMM_M, GEMM_K, device=device).to(torch.bfloat16)
        b = (torch.randn(GEMM_N, GEMM_K, device=device) / GEMM_K ** 0.5).to(torch.bfloat16)  # C ~ N(0, 1)
    c = torch.empty(GEMM_M, GEMM_N, dtype=torch.bfloat16, device=device)
    ab_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], gl.bfloat16)
    c_layout = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.bfloat16)
    a_d = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K], ab_layout)
    b_d = TensorDescriptor.from_tensor(b, [BLOCK_N, BLOCK_K], ab_layout)
    c_d = TensorDescriptor.from_tensor(c, [BLOCK_M, BLOCK_N], c_layout)
    grid = (GEMM_M // BLOCK_M, GEMM_N // BLOCK_N)
    if case == "ws-tma-mma":
        return (_ws_gemm_kernel, grid, (a_d, b_d, c_d, GEMM_K), {"NUM_STAGES": STAGES, "LOADER_NREG": LOADER_REGS},
                {"num_warps": 4}, {"a": a, "b": b, "c": c})
    return (_gemm_kernel, grid, (a_d, b_d, c_d, GEMM_K), {"NUM_STAGES": STAGES}, {"num_warps": 4},
            {"a": a, "b": b, "c": c})


def run(case: str) -> None:
    from pagedmla.testing.perf import time_gpu

    kernel, grid, args, constexprs, options, t = _spec(case, "cuda")

    def fn():
        kernel[grid](*args, **constexprs, **options)

    print(f"{case}: launching", file=sys.stderr, flush=True)
    fn()
    torch.cuda.synchronize()
    print(f"{case}: first launch returned", file=sys.stderr, flush=True)
    if case == "ws-plain":
        j = torch.arange(PLAIN_BLOCK, device="cuda", dtype=torch.int64)
        pid = torch.arange(PLAIN_GRID, device="cuda", dtype=torch.int64)[:, None]
        want = torch.stack([pid * 100000 + j, -(pid * 100000 + j) - 1], dim=1)
        err = float((t["out"].long() - want).abs().max())
        ok = err == 0
        extra = ""
    else:
        want = t["a"].float() @ t["b"].float().T
        err = float((t["c"].float() - want).abs().max())
        ok = err <= 1e-2 * float(want.abs().max())
        mm = time_gpu(lambda: torch.mm(t["a"], t["b"].t()), use_cuda_graph=True)
        extra = f" (torch.mm {GEMM_M}x{GEMM_K}->{GEMM_N} {mm.median_us:.1f} us)"
    tm = time_gpu(fn, use_cuda_graph=True)
    print(f"{case}: {'ok' if ok else 'WRONG'}, max err {err:.3g}, {tm.median_us:.1f} us{extra}", flush=True)


# ---------------------------------------------------------------------------------------------------- compile only


def _ptxas(ptx: str) -> str:
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        res = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", src, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, check=False)
    if res.returncode:
        return f"ptxas failed: {res.stderr[-600:]}"
    lines = [ln.split("info    : ")[-1] for ln in res.stderr.splitlines() if "Used" in ln or "spill" in ln]
    return " | ".join(lines)


_PTX_COUNTS = (
    ("setmaxnreg", r"setmaxnreg\.\w+"),
    ("mbarrier.init", r"mbarrier\.init"),
    ("mbarrier.wait", r"mbarrier\.try_wait"),
    ("mbarrier.arrive", r"mbarrier\.arrive\.shared"),
    ("arrive.expect_tx", r"mbarrier\.arrive\.expect_tx"),
    ("tma.load", r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global"),
    ("tma.store", r"cp\.async\.bulk\.tensor\.\dd\.global\.shared"),
    ("wgmma", r"wgmma\.mma_async"),
    ("wgmma.wait", r"wgmma\.wait_group"),
    ("fence.proxy.async", r"fence\.proxy\.async"),
    ("bar.sync", r"bar\.sync|barrier\.sync"),
    ("st.global", r"st\.global"),
    ("local", r"\w+\.local"),
)


def compile_only(case: str) -> bool:
    """Compile `case` for sm_90a without a GPU; print ptxas's usage and PTX instruction counts."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    kernel, _, args, constexprs, options, _ = _spec(case, "cpu")
    names = kernel.arg_names
    values = dict(zip([n for n in names if n not in constexprs], args, strict=True))
    sig = {n: "constexpr" if n in constexprs else mangle_type(values[n]) for n in names}
    # What a launch would assume: 16-divisible pointers and integer arguments (all of them are here).
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig[n] == "i32" or sig[n][0] == "*"}
    src = GluonASTSource(kernel, sig, constexprs={(names.index(k),): v for k, v in constexprs.items()}, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128), options=options)
    ptx = compiled.asm["ptx"]
    counts = {k: len(re.findall(p, ptx)) for k, p in _PTX_COUNTS}
    md = compiled.metadata
    print(f"{case}: warps {md.num_warps}, shared {md.shared} bytes | {_ptxas(ptx)}")
    print("    " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    regs = sorted(set(re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+\d+", ptx)))
    if regs:
        print("    " + "; ".join(regs))
    want = {"ws-plain": ("setmaxnreg", "st.global"),
            "ws-tma-mma": ("setmaxnreg", "mbarrier.wait", "mbarrier.arrive", "arrive.expect_tx", "tma.load", "wgmma"),
            "no-ws-tma-mma": ("mbarrier.wait", "arrive.expect_tx", "tma.load", "wgmma")}[case]
    missing = [k for k in want if not counts[k]]
    if case == "no-ws-tma-mma" and counts["setmaxnreg"]:
        missing.append("(unexpected setmaxnreg)")
    if missing:
        print(f"    MISSING from the PTX: {', '.join(missing)}")
    return not missing


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] == "--compile-only":
        ok = [compile_only(case) for case in (argv[1:] or CASES)]
        return 0 if all(ok) else 1
    if argv:
        run(argv[0])
        return 0
    for case in CASES:
        try:
            res = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True,
                                 timeout=TIMEOUT_S, check=False)
            out = res.stdout.strip()
            print(out if res.returncode == 0 and out else f"{case}: rc {res.returncode} {res.stderr.strip()[-400:]}",
                  flush=True)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            last = err.strip().splitlines()[-1] if err.strip() else "no progress line"
            print(f"{case}: TIMEOUT ({TIMEOUT_S} s, hung; last progress: {last})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
