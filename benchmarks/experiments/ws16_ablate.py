"""Where the 16-row FP8 decode's time goes, by taking partitions' work out (`pagedmla.kernels.mla_decode_ws16`):
patched copies of the kernel in which the widen warps only pass the ring's and W's barriers on (no loads,
conversions or stores: `no-widen`), the MMA warps only pass W's barriers on (no MMAs, no softmax: `no-mma`), or
both (`loader-only`: the copies alone); or the MMA warps without P @ V (`no-pv`) or without the logits'
MMAs (`no-logits`). Timed in one process against the unpatched copy (`base`), CUDA-graph
replays of decode_probe's cases (16 heads, one token, FP8, the launcher's config and a one-per-SM schedule).
The outputs of the patched copies are garbage and not checked: these are bounds, not kernels.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws16_ablate.py --case 64,4096 [--repeat 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode

# the widen partition's block loop, replaced by one that only passes the barriers on (the original stays, under a
# condition that never holds, so the patch needs no re-indenting)
WIDEN_PASS = """        for i in range(n_blocks):
            buf = c % 2
            mbarrier.wait(w_free.index(buf), ((c // 2) & 1) ^ 1)
            for h in gl.static_range(2):
                n = 2 * c + h
                mbarrier.wait(k_ready.index(n % SLOTS), (n // SLOTS) & 1)
                mbarrier.arrive(k_empty.index(n % SLOTS))
            mbarrier.arrive(w_ready.index(buf))
            c += 1
"""
MMA_PASS = """                for i in range(n_blocks):
                    buf = c % 2
                    mbarrier.wait(w_ready.index(buf), (c // 2) & 1)
                    mbarrier.arrive(w_free.index(buf))
                    c += 1
                for i in range(0):
"""


PV = """                    o0 = warpgroup_mma(_bf16(w0_s.index(buf), CHUNK).permute((1, 0)), pt, o0, is_async=True)
                    o1 = warpgroup_mma(_bf16(w1_s.index(buf), CHUNK).permute((1, 0)), pt, o1, is_async=True)
                    o2 = warpgroup_mma(_bf16(w2_s.index(buf), CHUNK).permute((1, 0)), pt, o2, is_async=True)
                    o3 = warpgroup_mma(_bf16(w3_s.index(buf), CHUNK).permute((1, 0)), pt, o3,
                                       is_async=True)
                    o0, o1, o2, o3 = warpgroup_mma_wait(num_outstanding=0, deps=(o0, o1, o2, o3))
"""
LOGITS_FIRST = "                    s_rope = warpgroup_mma(_bf16(wr_s.index(buf), D_ROPE)"
LOGITS_WAIT = "                    s_rope, s_lat = warpgroup_mma_wait(num_outstanding=0, deps=(s_rope, s_lat))\n"
ZERO_LOGITS = """                    s_rope = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
                    s_lat = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
                    sc = scw_s.index(buf).load(key_l)
"""


def _source(no_widen: bool, no_mma: bool, no_pv: bool = False, no_logits: bool = False) -> str:
    import pagedmla.kernels.mla_decode_ws16 as ws16
    patch = SourcePatch(pathlib.Path(ws16.__file__).read_text())
    for rel in ("fp8", "gluon_common", "mla_decode_ws"):
        patch.sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    if no_widen:
        patch.sub("        if n_blocks > 0:\n            x0, x1,",
                  WIDEN_PASS + "        if n_blocks < 0:\n            x0, x1,")
    if no_mma:
        patch.sub("                for i in range(n_blocks):\n                    buf = c % 2\n"
                  "                    k0 = k_lo + i * BLOCK_N\n",
                  MMA_PASS + "                    buf = c % 2\n                    k0 = k_lo + i * BLOCK_N\n")
    if no_pv:  # the MMA warps without P @ V (logits, softmax and P's stores stay)
        patch.sub(PV, "")
    if no_logits:  # the MMA warps without the logits' MMAs (zero logits; the softmax and P @ V stay)
        i = patch.src.index(LOGITS_FIRST)
        j = patch.src.index(LOGITS_WAIT) + len(LOGITS_WAIT)
        patch.src = patch.src[:i] + ZERO_LOGITS + patch.src[j:]
    return patch.src


VARIANTS = {"base": (False, False), "no-widen": (True, False), "no-mma": (False, True), "loader-only": (True, True),
            "no-pv": (False, False, True), "no-logits": (False, False, False, True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N (16 heads, one token)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    kernels = {name: load_patched(f"ws16_ablate_{name.replace('-', '_')}", _source(*flags))._mla_decode_ws16_kernel
               for name, flags in VARIANTS.items()}
    original = _triton_decode._mla_decode_ws16_kernel
    workers = torch.cuda.get_device_properties(0).multi_processor_count
    for text in args.case or ["64,4096"]:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        plan = case.plan(workers)
        for _ in range(args.repeat):
            for name, kernel in kernels.items():
                _triton_decode._mla_decode_ws16_kernel = kernel
                try:
                    us = _time_graph(case.run(plan, dataclasses.replace(WS16))) * 1e3 / case.copies
                finally:
                    _triton_decode._mla_decode_ws16_kernel = original
                print(f"B{b} N{n} W{workers} {name}: {us:.1f} us {case.bytes / us / 1e6:.2f} TB/s", flush=True)


if __name__ == "__main__":
    main()
