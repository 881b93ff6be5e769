"""Offline feasibility probe for a 16-row FP8 decode without a widened copy in shared memory (BENCHMARKS.md,
twenty-first session): can e4m3 key rows, loaded from shared memory 16 bytes per thread, be widened to fp16 in
registers and fed to a register-operand warpgroup MMA with no data moving between the load and the MMA?

Yes, for the logits' operand (K q^T, keys as the MMA's rows): the K axis is permuted instead of the data. A thread
of the MMA's register-operand layout holds, per 16 columns, columns 2t, 2t + 1, 2t + 8, 2t + 9 (t = lane % 4);
here it loads 16-byte units 2t and 2t + 1 of each row's 128-byte chunk, and a reshape and permute relabel
them so that column k = 64 g + 16 s + 8 h + 2 t + e is byte 32 t + 16 g + 4 s + 2 h + e. q must then be stored in the same
order. Compiled for sm_90a, the conversion to the operand layout is a register permutation: the SASS between the
shared loads and the MMAs is conversions (F2FP) only.

And for P @ V's operand (V^T, dims as the MMA's rows, keys on its K axis), which needs two keys'
bytes of one dim in each register: a thread loads one 4-byte word (4 dims) of each of its four keys, pairs the
words of keys 2kp and 2kp + 1 byte by byte (two `prmt` per pair), and widens each pair; the dims are relabeled
(row m = 64 a + 16 w + 8 h + r of the output is dim 32 w + 4 r + 2 a + h), which the output's store would
undo. Again only LDS, PRMT and F2FP between the loads and the MMAs. The index algebra of both is checked in
torch by `tests/test_ws16_rs_operands.py`; the kernel built on them, `pagedmla.kernels.mla_decode_ws16_rs`, is
tested in the gpu tier.

The operands are built by the kernel's own functions (`mla_decode_ws16_rs._k_operand`, `_v_operand`); the probe
kernels here only feed them a tile and an MMA.

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
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma

from pagedmla.kernels.mla_decode_ws16 import _acc_layout
from pagedmla.kernels.mla_decode_ws16_rs import _k_operand, _k_words, _v_operand, _v_words


@gluon.jit
def _tile_in_smem(x_ptr):
    """A `[64, 32]` int32 tile from global memory into shared memory (the ring slot pair's stand-in)."""
    blk: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 64, gl.SliceLayout(1, blk))
    c = gl.arange(0, 32, gl.SliceLayout(0, blk))
    raw_s = gl.allocate_shared_memory(gl.int32, [64, 32], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    raw_s.store(gl.load(x_ptr + r[:, None] * 32 + c[None, :]))
    return raw_s


@gluon.jit
def _b_in_smem(b_ptr, K: gl.constexpr, N: gl.constexpr, SWIZZLE: gl.constexpr):
    """The MMA's `[K, N]` operand (fp16, stored `[N, K]`) from global memory, fenced for the MMA."""
    lay: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    n = gl.arange(0, N, gl.SliceLayout(1, lay))
    k = gl.arange(0, K, gl.SliceLayout(0, lay))
    b_s = gl.allocate_shared_memory(gl.float16, [N, K], gl.NVMMASharedLayout(swizzle_byte_width=SWIZZLE,
                                                                              element_bitwidth=16, rank=2))
    b_s.store(gl.load(b_ptr + n[:, None] * K + k[None, :]))
    fence_async_shared()
    return b_s.permute((1, 0))


@gluon.jit
def probe(x_ptr, q_ptr, out_ptr):
    """S^T `[64, 16]` = K q^T from a `[64 keys, 128 bytes]` e4m3 chunk (`mla_decode_ws16_rs._k_operand`)."""
    qt = _b_in_smem(q_ptr, 128, 16, 128)
    raw_s = _tile_in_smem(x_ptr)
    gl.thread_barrier()
    acc = warpgroup_mma(_k_operand(raw_s.load(_k_words())), qt, gl.zeros([64, 16], gl.float32, _acc_layout()))
    on = gl.arange(0, 64, gl.SliceLayout(1, _acc_layout()))
    oc = gl.arange(0, 16, gl.SliceLayout(0, _acc_layout()))
    gl.store(out_ptr + on[:, None] * 16 + oc[None, :], acc)


@gluon.jit
def probe_pv(x_ptr, p_ptr, out_ptr):
    """O^T `[128, 16]` = V^T P^T from a `[64 keys, 128 bytes]` e4m3 chunk (`mla_decode_ws16_rs._v_operand`)."""
    pt = _b_in_smem(p_ptr, 64, 16, 128)
    raw_s = _tile_in_smem(x_ptr)
    gl.thread_barrier()
    acc = warpgroup_mma(_v_operand(raw_s.load(_v_words())), pt, gl.zeros([128, 16], gl.float32, _acc_layout()))
    on = gl.arange(0, 128, gl.SliceLayout(1, _acc_layout()))
    oc = gl.arange(0, 16, gl.SliceLayout(0, _acc_layout()))
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
    print("P @ V (V^T, 128 dims x 64 keys):", _between_loads_and_mma(
        probe_pv, {"x_ptr": "*i32", "p_ptr": "*fp16", "out_ptr": "*fp32"}))


if __name__ == "__main__":
    main()
