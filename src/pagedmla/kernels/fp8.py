"""Jit helpers of the FP8 (e4m3) cache paths shared by the decode kernels: round-to-nearest casts, the scales
of a gathered tile, and dequantization in the scale modes of `pagedmla.kernels.mla_sparse_decode` (with a
fast exact e4m3 -> bf16 conversion)."""

import triton
import triton.language as tl

from .common import dot, hide_from_dot_chain


@triton.jit
def _cast(x, DTYPE: tl.constexpr, INTERPRET: tl.constexpr):
    """`x.to(DTYPE)` rounding to nearest even: the CPU interpreter truncates float32 -> bf16, so there the
    rounding is done on the bits first (inf stays inf). A NaN becomes the quiet NaN: rounded like a number, or
    truncated, one with only low payload bits would turn into inf and one with all of them set into -0, and a NaN
    must stay a NaN for the tests to see it."""
    if INTERPRET and DTYPE == tl.bfloat16:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        nan = (bits & 0x7FFFFFFF) > 0x7F800000
        bits = tl.where(nan, 0x7FC00000, (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000)
        return bits.to(tl.float32, bitcast=True).to(DTYPE)
    return x.to(DTYPE)


@triton.jit
def _load_scales(srow, ok, C0: tl.constexpr, W: tl.constexpr, G: tl.constexpr, MODE: tl.constexpr,
                 NG: tl.constexpr, BLOCK_N: tl.constexpr):
    """The scales a `[BLOCK_N, W]` tile of columns `[C0, C0 + W)` needs: `[BLOCK_N]` (mode 1), `[BLOCK_N, NG]`
    (mode 2), `[BLOCK_N, W]` (mode 3); a dummy `[BLOCK_N]` otherwise."""
    if MODE == 1:
        return tl.load(srow + C0 // G, mask=ok, other=0.0)
    elif MODE == 2:
        return tl.load(srow[:, None] + (C0 // G + tl.arange(0, NG))[None, :], mask=ok[:, None], other=0.0)
    elif MODE == 3:
        return tl.load(srow[:, None] + ((C0 + tl.arange(0, W)) // G)[None, :], mask=ok[:, None], other=0.0)
    else:
        return tl.zeros([BLOCK_N], dtype=tl.float32)


# four e4m3 bytes ($2) -> two bf16x2 registers ($0, $1); see `_e4m3_to_bf16`
E4M3X4_TO_BF16_ASM = tl.constexpr("""
        {
        .reg .b32 y, t, c, z;
        mov.b32 c, 0x7B807B80;
        mov.b32 z, 0x80008000;
        prmt.b32 y, $2, 0, 0x1404;
        shr.b32 t, y, 4;
        lop3.b32 y, y, t, 0x80008000, 0xE4;
        and.b32 y, y, 0x87F087F0;
        fma.rn.bf16x2 $0, y, c, z;
        prmt.b32 y, $2, 0, 0x3424;
        shr.b32 t, y, 4;
        lop3.b32 y, y, t, 0x80008000, 0xE4;
        and.b32 y, y, 0x87F087F0;
        fma.rn.bf16x2 $1, y, c, z;
        }
        """)


@triton.jit
def _e4m3_to_bf16(x):
    """e4m3 values (any shape, four consecutive per thread) as bf16, exactly, in ten instructions per four.

    Triton converts e4m3 -> f16 -> f32 -> bf16, and its f16 -> f32 step runs at a quarter of the ALU rate: at 16
    heads the conversion, not the memory, bounded the FP8 decode. Here each byte's sign and 7 magnitude bits
    are moved into bf16 position (a byte permute and a shift per pair of values), which is the value times
    2^-120 with bf16's wider exponent (e4m3 subnormals land on bf16 subnormals, which bf16 arithmetic keeps),
    and one bf16x2 fma by 2^120 (plus -0, which keeps -0; a plain bf16x2 multiply would need sm_90) restores
    it exactly. The e4m3 NaN pattern comes out finite: the kernels
    never load a NaN byte that the softmax keeps. Not pure on purpose: the compiler then converts each tile
    once, in its loaded layout, instead of once per MMA operand layout (which also kept the load from being
    pipelined)."""
    return tl.inline_asm_elementwise(E4M3X4_TO_BF16_ASM, "=r,=r,r", [x.to(tl.uint8, bitcast=True)], dtype=tl.bfloat16,
                                     is_pure=False, pack=4)


@triton.jit
def _to_compute(x, CD: tl.constexpr, INTERPRET: tl.constexpr):
    """An e4m3 (or 16/32-bit) tile in the compute dtype CD: `_e4m3_to_bf16` for e4m3 -> bf16 on the GPU."""
    if x.dtype == tl.float8e4nv and CD == tl.bfloat16 and not INTERPRET:
        return _e4m3_to_bf16(x)
    else:
        return x.to(CD)


@triton.jit
def _dequant(x, s, W: tl.constexpr, MODE: tl.constexpr, NG: tl.constexpr, GS: tl.constexpr,
             BLOCK_N: tl.constexpr, CD: tl.constexpr, INTERPRET: tl.constexpr):
    """A gathered `[BLOCK_N, W]` tile in the compute dtype (modes 2 and 3 apply the scales `s`; modes 0 and 1
    only convert: mode 1's scale is applied to the logits and to P instead)."""
    if MODE == 2:
        x3 = tl.reshape(_to_compute(x, CD, INTERPRET).to(tl.float32), [BLOCK_N, NG, GS]) * s[:, :, None]
        return _cast(tl.reshape(x3, [BLOCK_N, W]), CD, INTERPRET)
    elif MODE == 3:
        return _cast(_to_compute(x, CD, INTERPRET).to(tl.float32) * s, CD, INTERPRET)
    else:
        return _to_compute(x, CD, INTERPRET)


@triton.jit
def _softmax_update(acc, m_i, l_i, s, v, s_v, opaque, V_ROW_SCALED: tl.constexpr, CD: tl.constexpr,
                    INTERPRET: tl.constexpr, IEEE: tl.constexpr):
    """One online-softmax step of the decode kernels: logits `s` (base 2, masked keys at -inf) against the
    running (acc, m_i, l_i), then `acc += P @ v` with P in the compute dtype CD. V_ROW_SCALED: `v` holds raw
    values whose per-row scale `s_v` moves onto P's columns (the scale mode 1 of `_dequant`). 64-row tiles
    pass P and the rescale through `hide_from_dot_chain` (`opaque`: a finite runtime float)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    # rows that have seen no key yet keep m = -inf; shift them by 0 so exp2 gives 0, not NaN
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if V_ROW_SCALED:
        p = p * s_v[None, :]
    if s.shape[0] >= 64:
        p, alpha = hide_from_dot_chain(p, alpha, opaque)
    acc = dot(_cast(p, CD, INTERPRET), v, acc * alpha[:, None], INTERPRET, IEEE)
    return acc, m_new, l_i
