"""Offline feasibility probe for a 16-row FP8 decode without a widened copy in shared memory (BENCHMARKS.md,
twenty-first session): can e4m3 key rows, loaded from shared memory 16 bytes per thread, be widened to fp16 in
registers and fed to a register-operand warpgroup MMA with no data moving between the load and the MMA?

Yes, for the logits' operand (K q^T, keys as the MMA's rows): the K axis is permuted instead of the data. A thread
of the MMA's register-operand layout holds, per 16 columns, columns 2t, 2t + 1, 2t + 8, 2t + 9 (t = lane % 4);
here it loads 16 consecutive bytes per row and 64-byte group, and a reshape and permute relabel them so that
column k = 64 g + 16 s + 8 h + 2 t + e is byte 64 g + 16 t + 4 s + 2 h + e. q must then be stored in the same
order. Compiled for sm_90a, the conversion to the operand layout is a register permutation: the SASS between the
shared loads and the MMAs is conversions (F2FP) only.

And for P @ V's operand (`probe_pv`: V^T, dims as the MMA's rows, keys on its K axis), which needs two keys'
bytes of one dim in each register: a thread loads one 4-byte word (4 dims) of each of its four keys, pairs the
words of keys 2kp and 2kp + 1 byte by byte (two `prmt` per pair), and widens each pair; the dims are relabeled
(row m = 64 a + 16 w + 8 h + r of the output is dim 32 w + 4 r + 2 a + h), which the output's store would
undo. Again only LDS, PRMT and F2FP between the loads and the MMAs. Neither probe has run on a GPU; the index
algebra of both is checked in torch by `ws16_rs.py --check-indices` (the draft kernel built on them).

    PYTHONPATH=src python3 benchmarks/experiments/rs_operand_probe.py      # no GPU needed

Prints, for each, the SASS instruction counts between the first shared load and the first MMA.
"""

import collections
import pathlib
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

F16X2 = gl.constexpr("""
        {
        .reg .b16 lo, hi;
        .reg .b32 a, b;
        mov.b32 {lo, hi}, $4;
        cvt.rn.f16x2.e4m3x2 a, lo;
        cvt.rn.f16x2.e4m3x2 b, hi;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        }
""")

@gluon.jit
def probe(x_ptr, q_ptr, out_ptr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    # physical int32 words [64 rows, 32 words] (128 e4m3 bytes per row): thread (warp w, lane 4r + t) holds rows
    # 16w + r and 16w + r + 8, words 4t..4t+3 and 16 + 4t..16 + 4t + 3
    ld: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [0, 16]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 32])
    blk: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 64, gl.SliceLayout(1, blk))
    c = gl.arange(0, 32, gl.SliceLayout(0, blk))
    x = gl.load(x_ptr + r[:, None] * 32 + c[None, :])
    q_l: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    qn = gl.arange(0, 16, gl.SliceLayout(1, q_l))
    qk = gl.arange(0, 128, gl.SliceLayout(0, q_l))
    q = gl.load(q_ptr + qn[:, None] * 128 + qk[None, :])
    q_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    q_s = gl.allocate_shared_memory(gl.float16, [16, 128], q_layout)
    q_s.store(q)
    fence_async_shared()
    gl.thread_barrier()
    raw_s = gl.allocate_shared_memory(gl.int32, [64, 32], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    raw_s.store(x)
    gl.thread_barrier()
    w = raw_s.load(ld)
    b0, b1, b2, b3 = gl.inline_asm_elementwise(F16X2, "=h,=h,=h,=h,r", [w], dtype=(gl.float16,) * 4,
                                               is_pure=True, pack=1)
    # physical byte order within a word: b0 b1 b2 b3
    # [64, 32, 2, 2]: (row, word, h, e), byte 4 word + 2 h + e (a join's new index is the last dimension, so the
    # low bit is joined last)
    phys = gl.join(gl.join(b0, b2), gl.join(b1, b3))
    phys = phys.reshape([64, 2, 4, 4, 2, 2])  # (row, g, t, s, h, e): byte = 64 g + 16 t + 4 s + 2 h + e
    logical = gl.permute(phys, (0, 1, 3, 4, 2, 5)).reshape([64, 128])  # k = 64 g + 16 s + 8 h + 2 t + e
    a = gl.convert_layout(logical, dot_a)
    acc = warpgroup_mma(a, q_s.permute((1, 0)), gl.zeros([64, 16], gl.float32, acc_l))
    on = gl.arange(0, 64, gl.SliceLayout(1, acc_l))
    oc = gl.arange(0, 16, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + on[:, None] * 16 + oc[None, :], acc)


PAIR = gl.constexpr("""
        {
        .reg .b32 lo, hi;
        prmt.b32 lo, $8, $9, 0x5140;
        prmt.b32 hi, $8, $9, 0x7362;
        .reg .b16 l0, l1, h0, h1;
        mov.b32 {l0, l1}, lo;
        mov.b32 {h0, h1}, hi;
        .reg .b32 a, b, c, d;
        cvt.rn.f16x2.e4m3x2 a, l0;
        cvt.rn.f16x2.e4m3x2 b, l1;
        cvt.rn.f16x2.e4m3x2 c, h0;
        cvt.rn.f16x2.e4m3x2 d, h1;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        mov.b32 {$4, $5}, c;
        mov.b32 {$6, $7}, d;
        }
""")


@gluon.jit
def probe_pv(x_ptr, p_ptr, out_ptr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
    dot_a: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    # raw words [16 keys, 32 words] (128 e4m3 dims per key): thread (warp w, lane 4r + t) holds keys 2t, 2t + 1,
    # 2t + 8, 2t + 9 of word 8w + r
    ld: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [8, 0]], lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
        warp_bases=[[0, 8], [0, 16]], block_bases=[], shape=[16, 32])
    blk: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, blk))
    c = gl.arange(0, 32, gl.SliceLayout(0, blk))
    x = gl.load(x_ptr + r[:, None] * 32 + c[None, :])
    pl: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
    pk = gl.arange(0, 16, gl.SliceLayout(1, pl))
    pn = gl.arange(0, 16, gl.SliceLayout(0, pl))
    p = gl.load(p_ptr + pk[:, None] * 16 + pn[None, :])
    p_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=16, rank=2)
    p_s = gl.allocate_shared_memory(gl.float16, [16, 16], p_layout)
    p_s.store(p)
    fence_async_shared()
    raw_s = gl.allocate_shared_memory(gl.int32, [16, 32], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    raw_s.store(x)
    gl.thread_barrier()
    w = raw_s.load(ld)  # [16 keys, 32 words]
    ev, od = w.reshape([8, 2, 32]).permute((0, 2, 1)).split()  # keys 2kp and 2kp + 1: [8, 32] each
    # per word, dims j = 0..3, each as (key 2kp, key 2kp + 1)
    d0e, d0o, d1e, d1o, d2e, d2o, d3e, d3o = gl.inline_asm_elementwise(
        PAIR, "=h,=h,=h,=h,=h,=h,=h,=h,r,r", [ev, od], dtype=(gl.float16,) * 8, is_pure=True, pack=1)
    d0 = gl.join(d0e, d0o)
    d1 = gl.join(d1e, d1o)
    d2 = gl.join(d2e, d2o)
    d3 = gl.join(d3e, d3o)
    t = gl.join(gl.join(d0, d1), gl.join(d2, d3))  # [kp 8, word 32, e 2, jlo 2, jhi 2]: dim 4 word + 2 jhi + jlo
    t = t.permute((0, 1, 4, 3, 2))  # [kp, word, jhi, jlo, e]
    t = t.reshape([2, 4, 4, 8, 2, 2, 2])  # [hk, tt, w, r, a(jhi), h(jlo), e]
    t = t.permute((4, 2, 5, 3, 0, 1, 6))  # [a, w, h, r, hk, tt, e]
    a = gl.convert_layout(t.reshape([128, 16]), dot_a)  # m = 64 a + 16 w + 8 h + r, k = 8 hk + 2 tt + e
    acc = warpgroup_mma(a, p_s, gl.zeros([128, 16], gl.float32, acc_l))
    on = gl.arange(0, 128, gl.SliceLayout(1, acc_l))
    oc = gl.arange(0, 16, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + on[:, None] * 16 + oc[None, :], acc)



def _between_loads_and_mma(kernel, types) -> collections.Counter:
    """SASS instruction counts from the first shared load after the tile is stored to the first MMA."""
    import compile_sm90
    import triton
    k = compile_sm90.compile_kernel(kernel, types, {}, 4, 1)
    tool = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    ops = [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)]
    barrier = ops.index("BAR.SYNC.DEFER_BLOCKING")  # the tile is in shared memory
    first_load = next(i for i, op in enumerate(ops) if op.startswith("LDS") and i > barrier)
    first_mma = next(i for i, op in enumerate(ops) if op.startswith("HGMMA"))
    return collections.Counter(op.split(".")[0] for op in ops[first_load:first_mma])


def main() -> None:
    print("logits (K, 64 keys x 128 dims):", _between_loads_and_mma(
        probe, {"x_ptr": "*i32", "q_ptr": "*fp16", "out_ptr": "*fp32"}))
    print("P @ V (V^T, 128 dims x 16 keys):", _between_loads_and_mma(
        probe_pv, {"x_ptr": "*i32", "p_ptr": "*fp16", "out_ptr": "*fp32"}))


if __name__ == "__main__":
    main()
