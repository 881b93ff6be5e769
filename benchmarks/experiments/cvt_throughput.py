"""Throughput of three e4m3 -> 16-bit conversions on the GPU, in values per nanosecond per SM: the native
`cvt.rn.f16x2.e4m3x2` (two per four values), the exact bf16 conversion the shipped kernels use
(`pagedmla.kernels.fp8.E4M3X4_TO_BF16_ASM`: integer and bf16 FMA instructions), and integer instructions alone
(shifts, masks, byte permutes: fp16 bits times 2^-8, NaN not kept; a candidate to run beside the native one on
the other pipe). Written for the register-operand FP8 decode (`pagedmla.kernels.mla_decode_ws16_rs`), whose speed depends on it
(BENCHMARKS.md, twenty-first session). Not yet run on a GPU.

    PYTHONPATH=src python3 benchmarks/experiments/cvt_throughput.py

Each thread converts eight independent words per iteration (an xor with the iteration keeps the compiler from
hoisting them, and an xor of the results keeps them alive); the loop's two xors per word run beside the
conversions. Times are CUDA events over a few launches after a warm-up.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedmla.kernels.fp8 import E4M3X4_TO_BF16_ASM

E4M3X4_TO_F16_NATIVE = tl.constexpr("""
        {
        .reg .b16 lo, hi;
        mov.b32 {lo, hi}, $2;
        cvt.rn.f16x2.e4m3x2 $0, lo;
        cvt.rn.f16x2.e4m3x2 $1, hi;
        }
        """)

# byte b = s eeee mmm -> fp16 bits (s, 0eeee, mmm0000000): high byte s0eeeemm, low byte m0000000
E4M3X4_TO_F16_INT = tl.constexpr("""
        {
        .reg .b32 h, l, t;
        shr.b32 t, $2, 1;
        and.b32 t, t, 0x3F3F3F3F;
        lop3.b32 h, $2, 0x80808080, t, 0xEA;
        shl.b32 l, $2, 7;
        and.b32 l, l, 0x80808080;
        prmt.b32 $0, l, h, 0x5140;
        prmt.b32 $1, l, h, 0x7362;
        }
        """)

MODES = {"native cvt (f16)": 0, "exact bf16 (shipped)": 1, "integer (f16 bits)": 2}


@triton.jit
def _convert_kernel(x_ptr, out_ptr, ITERS: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x0 = tl.load(x_ptr + offs)
    acc = tl.zeros([BLOCK], tl.int32)
    for i in range(ITERS):
        x = x0 ^ i
        if MODE == 0:
            a, b = tl.inline_asm_elementwise(E4M3X4_TO_F16_NATIVE, "=r,=r,r", [x], dtype=(tl.int32, tl.int32),
                                             is_pure=True, pack=1)
        elif MODE == 1:
            a, b = tl.inline_asm_elementwise(E4M3X4_TO_BF16_ASM, "=r,=r,r", [x], dtype=(tl.int32, tl.int32),
                                             is_pure=True, pack=1)
        else:
            a, b = tl.inline_asm_elementwise(E4M3X4_TO_F16_INT, "=r,=r,r", [x], dtype=(tl.int32, tl.int32),
                                             is_pure=True, pack=1)
        acc ^= a ^ b
    tl.store(out_ptr + offs, acc)


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    block, iters, warps = 1024, 2048, 4  # 8 words per thread
    grid = sms * 8
    x = torch.randint(-2**31, 2**31 - 1, (grid * block,), dtype=torch.int32, device="cuda")
    out = torch.empty_like(x)
    values = grid * block * iters * 4
    for name, mode in MODES.items():
        kernel = _convert_kernel[(grid,)]
        kernel(x, out, ITERS=iters, MODE=mode, BLOCK=block, num_warps=warps)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            kernel(x, out, ITERS=iters, MODE=mode, BLOCK=block, num_warps=warps)
        end.record()
        torch.cuda.synchronize()
        ns = start.elapsed_time(end) * 1e6 / 5
        print(f"{name}: {values / ns / sms:.1f} values per ns per SM ({ns / 1e3:.1f} us a launch)", flush=True)


if __name__ == "__main__":
    main()
