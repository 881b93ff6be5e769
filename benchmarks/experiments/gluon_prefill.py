"""Experiment: causal MLA prefill attention in Gluon with warp specialization (FA3-style), against cuDNN.

Not wired into the package. It answers whether a hand-specialized Hopper kernel clears the prefill target that the
Triton kernel misses (BENCHMARKS.md: 0.55-0.70 of cuDNN). Prototype scope: B sequences of L new tokens each (L a
multiple of 128, no cached prefix), causal, bf16, q/k head size 128 + 64 rope (the rope keys one `[T, 64]` tensor
shared by every head, as the cache holds them), v head size 128, output and LSE.

Structure: one program per (128-row query tile, head), heaviest tiles first. Three partitions:
- a 1-warp loader: TMA loads of q (once) and of each key block (k, rope keys, v) into a STAGES-deep ring
  (`ready` barriers with expected bytes; `empty` barriers, one arrival per consumer, free a stage);
- two 4-warp consumers, 64 query rows each: S = q k^T by warpgroup MMAs (q from shared memory), the online
  softmax in registers, O += P V with P from registers. The MMA of the next block's S is issued before this
  block's softmax, so the tensor cores work while the softmax runs.

    PYTHONPATH=src python3 benchmarks/experiments/gluon_prefill.py                 # check + time (H200)
    PYTHONPATH=src python3 benchmarks/experiments/gluon_prefill.py --compile-only  # sm_90a, no GPU
"""

from __future__ import annotations

import math
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
    warpgroup_mma_init,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

_NOPE, _ROPE, _DV, _BLOCK_M, _HALF = 128, 64, 128, 128, 64  # host values; the kernels' constexprs below
D_NOPE = gl.constexpr(_NOPE)
D_ROPE = gl.constexpr(_ROPE)
D_V = gl.constexpr(_DV)
BLOCK_M = gl.constexpr(_BLOCK_M)  # query rows per program: two consumers of 64
HALF = gl.constexpr(_HALF)
LN2 = gl.constexpr(0.6931471805599453)


@gluon.constexpr_function
def _mma_layout(n):
    """Accumulator layout of a 64-row warpgroup MMA over n columns (one consumer's 4 warps)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.jit
def _softmax_step(s, m_i, l_i, key0, rows, row_first, qk_scale, BLOCK_N: gl.constexpr):
    """One online-softmax step on logits s [64, BLOCK_N] (keys key0...), causal: P, alpha, new m and l."""
    s_layout: gl.constexpr = _mma_layout(BLOCK_N)
    s = s * qk_scale
    if key0 + BLOCK_N - 1 > row_first:  # a block on the diagonal: mask keys past each row
        keys = key0 + gl.arange(0, BLOCK_N, gl.SliceLayout(0, s_layout))
        s = gl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _pv(acc, p, alpha, v, BLOCK_N: gl.constexpr):
    """acc * alpha + P @ v, issued asynchronously (P from registers in bf16)."""
    o_layout: gl.constexpr = _mma_layout(D_V)
    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
    p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return warpgroup_mma(p_op, v, acc, is_async=True)


@gluon.jit
def _consumer(C: gl.constexpr, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready, k_empty, v_ready, v_empty, o_desc,
              lse_ptr, tile_row0, tile_pos0, n_blocks, head, qk_scale, stride_lse_t,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Query rows [64 C, 64 C + 64) of the tile. Keys and values have rings of their own: block i's keys are
    released once its logits are done, its values once its P @ V is, so the next block's logits can be issued
    while this block's values (and the previous block's, still in an MMA) stay resident."""
    s_layout: gl.constexpr = _mma_layout(BLOCK_N)
    o_layout: gl.constexpr = _mma_layout(D_V)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_first = tile_pos0 + HALF * C
    rows = row_first + gl.arange(0, HALF, row_layout)
    qn = qn_s.index(C)
    qr = qr_s.index(C)
    m_i = gl.full([HALF], float("-inf"), gl.float32, row_layout)
    l_i = gl.zeros([HALF], gl.float32, row_layout)
    # an accumulator value from the start: the loop carries the P @ V still in flight
    acc = warpgroup_mma_init(gl.zeros([HALF, D_V], gl.float32, o_layout))
    zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, s_layout)

    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_ready.index(0), 0)
    s = warpgroup_mma(qn, kn_s.index(0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma(qr, kr_s.index(0).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    mbarrier.arrive(k_empty.index(0))
    for i in range(n_blocks - 1):
        # the next block's logits go to the tensor cores before this block's softmax
        nx = (i + 1) % STAGES
        mbarrier.wait(k_ready.index(nx), ((i + 1) // STAGES) & 1)
        s_next = warpgroup_mma(qn, kn_s.index(nx).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s_next = warpgroup_mma(qr, kr_s.index(nx).permute((1, 0)), s_next, is_async=True)
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, i * BLOCK_N, rows, row_first, qk_scale, BLOCK_N)
        # P @ V of block i - 1 is the oldest MMA group in flight (the next logits' two are newer)
        acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc,))
        mbarrier.arrive(v_empty.index((i + STAGES - 1) % STAGES), pred=i > 0)
        mbarrier.wait(v_ready.index(i % STAGES), (i // STAGES) & 1)
        acc = _pv(acc, p, alpha, v_s.index(i % STAGES), BLOCK_N)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_next,))
        mbarrier.arrive(k_empty.index(nx))
    last = n_blocks - 1
    p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, last * BLOCK_N, rows, row_first, qk_scale, BLOCK_N)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    mbarrier.arrive(v_empty.index((last + STAGES - 1) % STAGES), pred=last > 0)
    mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
    acc = _pv(acc, p, alpha, v_s.index(last % STAGES), BLOCK_N)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    out = acc / l_o[:, None]
    # the q tile's shared memory holds the output on its way out (its last MMA has retired)
    qn.store(out.to(gl.bfloat16))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [tile_row0 + HALF * C, head * D_V], qn)
    lse = (m_i + gl.log2(l_i)) * LN2
    offs = gl.arange(0, HALF, row_layout)
    gl.store(lse_ptr + (tile_row0 + HALF * C + offs).to(gl.int64) * stride_lse_t + head, lse)
    tma.store_wait(0)


@gluon.jit
def _loader(qn_desc, qr_desc, k_desc, kr_desc, v_desc, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready, k_empty,
            v_ready, v_empty, tile_row0, key_row0, head, n_blocks, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(q_bar, 2 * qn_desc.block_type.nbytes + 2 * qr_desc.block_type.nbytes)
    for c in gl.static_range(2):
        tma.async_copy_global_to_shared(qn_desc, [tile_row0 + HALF * c, head * (D_NOPE + D_ROPE)], q_bar,
                                        qn_s.index(c))
        tma.async_copy_global_to_shared(qr_desc, [tile_row0 + HALF * c, head * (D_NOPE + D_ROPE) + D_NOPE], q_bar,
                                        qr_s.index(c))
    for i in range(n_blocks):
        st = i % STAGES
        # a fresh barrier passes a wait for parity 1: the first STAGES loads go at once
        phase = ((i // STAGES) & 1) ^ 1
        row = key_row0 + i * BLOCK_N
        mbarrier.wait(k_empty.index(st), phase)
        bar = k_ready.index(st)
        mbarrier.expect(bar, k_desc.block_type.nbytes + kr_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [row, head * D_NOPE], bar, kn_s.index(st))
        tma.async_copy_global_to_shared(kr_desc, [row, 0], bar, kr_s.index(st))
        mbarrier.wait(v_empty.index(st), phase)
        mbarrier.expect(v_ready.index(st), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [row, head * D_V], v_ready.index(st), v_s.index(st))


@gluon.jit
def _prefill_ws_kernel(qn_desc, qr_desc, k_desc, kr_desc, v_desc, o_desc, lse_ptr, seq_len, qk_scale, stride_lse_t,
                       BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                       LOADER_REGS: gl.constexpr):
    tiles = seq_len // BLOCK_M
    pid = gl.program_id(0)
    head = gl.program_id(1)
    seq = pid // tiles
    t = tiles - 1 - pid % tiles  # the heaviest (last) query tiles of each sequence first
    key_row0 = seq * seq_len
    tile_row0 = key_row0 + t * BLOCK_M
    n_blocks = (t + 1) * BLOCK_M // BLOCK_N

    qn_s = gl.allocate_shared_memory(gl.bfloat16, [2, HALF, D_NOPE], qn_desc.layout)
    qr_s = gl.allocate_shared_memory(gl.bfloat16, [2, HALF, D_ROPE], qr_desc.layout)
    kn_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_NOPE], k_desc.layout)
    kr_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_ROPE], kr_desc.layout)
    v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BLOCK_N, D_V], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for st in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(st), count=1)
        mbarrier.init(v_ready.index(st), count=1)
        mbarrier.init(k_empty.index(st), count=2)  # one arrival per consumer
        mbarrier.init(v_empty.index(st), count=2)
    fence_async_shared()

    gl.warp_specialize([
        (_consumer, (0, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready, k_empty, v_ready, v_empty, o_desc, lse_ptr, tile_row0, t * BLOCK_M,
                     n_blocks, head, qk_scale, stride_lse_t, BLOCK_N, STAGES)),
        (_consumer, (1, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready, k_empty, v_ready, v_empty, o_desc, lse_ptr, tile_row0, t * BLOCK_M,
                     n_blocks, head, qk_scale, stride_lse_t, BLOCK_N, STAGES)),
        (_loader, (qn_desc, qr_desc, k_desc, kr_desc, v_desc, qn_s, qr_s, kn_s, kr_s, v_s, q_bar, k_ready, k_empty, v_ready, v_empty,
                   tile_row0, key_row0, head, n_blocks, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, LOADER_REGS])


CONFIGS = {  # name: (BLOCK_N, STAGES, consumer registers, loader registers)
    "n128-s2": (128, 2, 232, 24),
    "n64-s3": (64, 3, 232, 24),
}


def _descs(q, k, v, rope, out, block_n):
    t, h = q.shape[0], q.shape[1]

    def desc(x2d, block):
        return TensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))
    return (desc(q.view(t, -1), [_HALF, _NOPE]), desc(q.view(t, -1), [_HALF, _ROPE]),
            desc(k.view(t, -1), [block_n, _NOPE]), desc(rope, [block_n, _ROPE]),
            desc(v.view(t, -1), [block_n, _DV]), desc(out.view(t, -1), [_HALF, _DV]))


def prefill(q, k, v, rope, seq_len: int, scale: float, config: str = "n128-s2"):
    """out [T, H, 128] bf16 and lse [T, H] float32 of B = T // seq_len causal sequences."""
    block_n, stages, cregs, lregs = CONFIGS[config]
    t, h = q.shape[0], q.shape[1]
    out = torch.empty(t, h, _DV, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(t, h, dtype=torch.float32, device=q.device)
    descs = _descs(q, k, v, rope, out, block_n)
    grid = (t // _BLOCK_M, h)
    _prefill_ws_kernel[grid](*descs, lse, seq_len, scale * math.log2(math.e), lse.stride(0), BLOCK_N=block_n,
                             STAGES=stages, CONSUMER_REGS=cregs, LOADER_REGS=lregs, num_warps=4)
    return out, lse


def _inputs(batch, seq_len, heads, device="cuda", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    t = batch * seq_len
    q = torch.randn(t, heads, _NOPE + _ROPE, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(t, heads, _NOPE, generator=g).to(torch.bfloat16).to(device)
    v = torch.randn(t, heads, _DV, generator=g).to(torch.bfloat16).to(device)
    rope = torch.randn(t, _ROPE, generator=g).to(torch.bfloat16).to(device)
    return q, k, v, rope


def _sdpa_inputs(q, k, v, rope, batch, seq_len):
    heads = q.shape[1]
    kf = torch.cat([k, rope[:, None, :].expand(-1, heads, -1)], dim=-1)

    def bhld(x):
        return x.view(batch, seq_len, heads, -1).transpose(1, 2)
    return bhld(q), bhld(kf), bhld(v)


def check_small():
    """Against float32 math on 2 sequences of 512 tokens, 3 heads."""
    batch, seq_len, heads = 2, 512, 3
    q, k, v, rope = _inputs(batch, seq_len, heads)
    scale = (_NOPE + _ROPE) ** -0.5
    qs, ks, vs = (x.float() for x in _sdpa_inputs(q, k, v, rope, batch, seq_len))
    logits = (qs @ ks.transpose(-1, -2)) * scale
    mask = torch.ones(seq_len, seq_len, dtype=torch.bool, device="cuda").tril()
    logits = logits.masked_fill(~mask, float("-inf"))
    want = (torch.softmax(logits, -1) @ vs).transpose(1, 2).reshape(batch * seq_len, heads, _DV)
    want_lse = torch.logsumexp(logits, -1).transpose(1, 2).reshape(batch * seq_len, heads)
    for name in CONFIGS:
        out, lse = prefill(q, k, v, rope, seq_len, scale, name)
        torch.cuda.synchronize()
        err, lerr = float((out.float() - want).abs().max()), float((lse - want_lse).abs().max())
        print(f"check {name}: max |out - ref| {err:.4f}, max |lse - ref| {lerr:.2e}", flush=True)


def bench():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pagedmla.testing.perf import time_gpu

    for batch, seq_len, heads in ((1, 8192, 128), (4, 4096, 128), (16, 1024, 128), (2, 4096, 16)):
        q, k, v, rope = _inputs(batch, seq_len, heads)
        scale = (_NOPE + _ROPE) ** -0.5
        qs, ks, vs = _sdpa_inputs(q, k, v, rope, batch, seq_len)
        qs, ks, vs = qs.contiguous(), ks.contiguous(), vs.contiguous()
        flops = 2 * heads * (_NOPE + _ROPE + _DV) * batch * seq_len ** 2 / 2

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        ref = cudnn().transpose(1, 2).reshape(batch * seq_len, heads, _DV)
        t_ref = time_gpu(cudnn, use_cuda_graph=True).median_us
        line = f"{batch}x{seq_len} H{heads}: cudnn {t_ref:.1f} us {flops / t_ref * 1e-6:.0f} TFLOP/s"
        for name in CONFIGS:
            out, _ = prefill(q, k, v, rope, seq_len, scale, name)
            err = float((out.float() - ref.float()).abs().max())
            t = time_gpu(lambda name=name: prefill(q, k, v, rope, seq_len, scale, name), use_cuda_graph=True).median_us
            line += f" | {name} {t:.1f} us {flops / t * 1e-6:.0f} TFLOP/s ({t_ref / t:.2f}, err {err:.3f})"
        print(line, flush=True)


def compile_only():
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    t, h = 1024, 4
    q, k, v, rope = (x.cpu() for x in _inputs(1, t, h, device="cpu"))
    out = torch.empty(t, h, _DV, dtype=torch.bfloat16)
    lse = torch.empty(t, h)
    kernel = _prefill_ws_kernel
    for name, (block_n, stages, cregs, lregs) in CONFIGS.items():
        args = (*_descs(q, k, v, rope, out, block_n), lse, t, 1.0, h)
        constexprs = {"BLOCK_N": block_n, "STAGES": stages, "CONSUMER_REGS": cregs, "LOADER_REGS": lregs}
        names = kernel.arg_names
        values = dict(zip([n for n in names if n not in constexprs], args, strict=True))
        sig = {n: "constexpr" if n in constexprs else mangle_type(values[n]) for n in names}
        attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                 if sig[n] == "i32" or sig[n][0] == "*"}
        src = GluonASTSource(kernel, sig, constexprs={(names.index(c),): val for c, val in constexprs.items()},
                             attrs=attrs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128), options={"num_warps": 4})
        ptx = compiled.asm["ptx"]
        ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "k.ptx")
            with open(path, "w") as f:
                f.write(ptx)
            res = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", path, "-o", path + ".cubin"],
                                 capture_output=True, text=True, check=False)
        usage = " | ".join(ln.split("info    : ")[-1] for ln in res.stderr.splitlines() if "Used" in ln or "spill" in ln)
        regs = sorted(set(re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+\d+", ptx)))
        print(f"{name}: shared {compiled.metadata.shared} | {usage or res.stderr[-400:]} | {'; '.join(regs)}")
        print(f"    wgmma {len(re.findall(r'wgmma.mma_async', ptx))}, tma "
              f"{len(re.findall(r'cp.async.bulk.tensor', ptx))}, local {len(re.findall(r'ld.local|st.local', ptx))}")


def main() -> int:
    argv = sys.argv[1:]
    if argv == ["--compile-only"]:
        compile_only()
        return 0
    if argv:  # one stage, in this process
        {"check": check_small, "bench": bench}[argv[0]]()
        return 0
    for stage, timeout in (("check", 45), ("bench", 150)):  # a hang must not eat the device call
        try:
            res = subprocess.run([sys.executable, __file__, stage], capture_output=True, text=True,
                                 timeout=timeout, check=False)
            print(res.stdout.strip() or f"{stage}: rc {res.returncode} {res.stderr.strip()[-600:]}", flush=True)
            if res.returncode:
                return 1
        except subprocess.TimeoutExpired:
            print(f"{stage}: TIMEOUT ({timeout} s: hung)", flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
