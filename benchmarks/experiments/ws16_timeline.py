"""Timeline of the 16-row warp-specialized FP8 decode (`pagedmla.kernels.mla_decode_ws16`): where each key block's
time goes, per partition, inside a CUDA graph of back-to-back calls.

    PYTHONPATH=src python3 benchmarks/experiments/ws16_timeline.py [--case 64,4096] [--workers 132] [--json F]

Like `ws_timeline.py`: a copy of the kernel module with `%globaltimer` stamps patched into its source is swapped
into the launcher. Each program stamps its first NB key blocks (over its pieces): the loader when it has issued
the block's copies (its second half's); the widen warps when the block's W buffer is free, when the block (its
second half) has arrived and when it is widened; the MMA warps when the widened block is ready, when its logits
are done, when P is in shared memory and when P @ V is done. Printed for a middle call: medians over programs
of each stamp relative to the block's loader stamp, and of the per-block periods and phases of blocks 2 to NB - 1. Not a harness: times are only what the stamps see (16 heads, one token, FP8).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case
from stamped_kernels import SourcePatch, load_patched, replay_stamped

NB = 8  # blocks stamped per program
STAMPS = ["load_issued", "widen_free", "widen_arrived", "widen_done", "mma_ready", "qk_done", "p_stored",
          "pv_done"]
PER = len(STAMPS)
WIDTH = NB * PER

_HELPER = f'''

@gluon.jit
def _stamp(ptr, c, k: gl.constexpr):
    if c < {NB}:
        t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [c], dtype=gl.int64, is_pure=False,
                                      pack=1)
        gl.store(ptr + gl.program_id(0) * {WIDTH} + c * {PER} + k, t)
'''


def _patched_source() -> str:
    import pagedmla.kernels.mla_decode_ws16 as ws16
    patch = SourcePatch(pathlib.Path(ws16.__file__).read_text())
    sub = patch.sub
    sub("from .fp8", "from pagedmla.kernels.fp8")
    sub("from .gluon_common", "from pagedmla.kernels.gluon_common")
    sub("from .mla_decode_ws", "from pagedmla.kernels.mla_decode_ws")
    sub("\n\n@gluon.jit\ndef _span(", _HELPER + "\n\n@gluon.jit\ndef _span(")
    # the stamp buffer: the kernel's argument after scales_ptr, each partition's last argument
    sub("    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr,\n",
        "    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr, stamps_ptr,\n")
    sub("            SLOTS: gl.constexpr, SPLIT_LATENT: gl.constexpr):\n",
        "            SLOTS: gl.constexpr, SPLIT_LATENT: gl.constexpr, stamps_ptr):\n")
    sub("             SLOTS: gl.constexpr, WIDEN_WARPS: gl.constexpr):\n",
        "             SLOTS: gl.constexpr, WIDEN_WARPS: gl.constexpr, stamps_ptr):\n")
    sub("               stride_po_s, stride_po_r, stride_pl_s, HAS_SINK: gl.constexpr):\n",
        "               stride_po_s, stride_po_r, stride_pl_s, HAS_SINK: gl.constexpr, stamps_ptr):\n")
    sub("stride_po_s, stride_po_r, stride_pl_s, HAS_SINK)),", "stride_po_s, stride_po_r, stride_pl_s, HAS_SINK, stamps_ptr)),")
    sub("SLOTS,\n                    WIDEN_WARPS)),", "SLOTS,\n                    WIDEN_WARPS, stamps_ptr)),")
    sub("stride_lt_b, SLOTS, False)),", "stride_lt_b, SLOTS, False, stamps_ptr)),")
    # loader (the block's second half overwrites the first's stamp)
    sub("                            tma.async_copy_global_to_shared(rope_desc, [row, D_LAT // 4], bar, rr_s.index(st))\n",
        "                            tma.async_copy_global_to_shared(rope_desc, [row, D_LAT // 4], bar, rr_s.index(st))\n"
        "                            _stamp(stamps_ptr, c, 0)\n")
    # widen
    # (the second half arrives, read ahead, before the block's W buffer is waited for)
    sub("                                                    sc_layout)\n                mbarrier.wait(w_free",
        "                                                    sc_layout)\n                _stamp(stamps_ptr, c, 2)\n"
        "                mbarrier.wait(w_free")
    sub("                mbarrier.wait(w_free.index(buf), ((c // 2) & 1) ^ 1)\n",
        "                mbarrier.wait(w_free.index(buf), ((c // 2) & 1) ^ 1)\n                _stamp(stamps_ptr, c, 1)\n")
    sub("                mbarrier.arrive(w_ready.index(buf))\n",
        "                _stamp(stamps_ptr, c, 3)\n                mbarrier.arrive(w_ready.index(buf))\n")
    # MMA
    sub("                    mbarrier.wait(w_ready.index(buf), (c // 2) & 1)\n",
        "                    mbarrier.wait(w_ready.index(buf), (c // 2) & 1)\n                    _stamp(stamps_ptr, c, 4)\n")
    sub("                    s_rope, s_lat = warpgroup_mma_wait(num_outstanding=0, deps=(s_rope, s_lat))\n",
        "                    s_rope, s_lat = warpgroup_mma_wait(num_outstanding=0, deps=(s_rope, s_lat))\n"
        "                    _stamp(stamps_ptr, c, 5)\n")
    sub("                    pt = p_s.permute((1, 0))\n",
        "                    _stamp(stamps_ptr, c, 6)\n                    pt = p_s.permute((1, 0))\n")
    sub("                    mbarrier.arrive(w_free.index(buf))\n",
        "                    mbarrier.arrive(w_free.index(buf))\n                    _stamp(stamps_ptr, c, 7)\n")
    return patch.src


def _median(x: torch.Tensor) -> float:
    return round(statistics.median(x.double().tolist()) / 1000, 3)


def timeline(case: Case, workers: int, calls: int) -> dict:
    from pagedmla.configs.decode import WS16
    plan = case.plan(workers)
    stamps = torch.zeros(calls, workers, WIDTH, dtype=torch.int64, device="cuda")
    kernel = load_patched("mla_decode_ws16_stamped", _patched_source())._mla_decode_ws16_kernel
    run = case.run
    case.run = lambda p, cfg, combine=None: run(p, WS16, combine)
    try:
        used = replay_stamped(case, plan, "_mla_decode_ws16_kernel", kernel, stamps, 14, calls)
    finally:
        case.run = run
    s = stamps[used // 2].cpu().view(workers, NB, PER)
    ok = (s > 0).all(dim=2).all(dim=1)  # programs that stamped all NB blocks
    s = s[ok]
    rel = {name: [_median(s[:, b, k] - s[:, b, 0]) for b in range(NB)] for k, name in enumerate(STAMPS)}
    mid = slice(2, NB)
    prev = slice(1, NB - 1)
    phases = {
        "mma_period": _median((s[:, mid, 7] - s[:, prev, 7]).flatten()),
        "widen_period": _median((s[:, mid, 3] - s[:, prev, 3]).flatten()),
        "load_period": _median((s[:, mid, 0] - s[:, prev, 0]).flatten()),
        "widen_wait_free": _median((s[:, mid, 1] - s[:, prev, 3]).flatten()),
        "widen_first_half_wait": _median((s[:, mid, 2] - s[:, mid, 1]).flatten()),
        "widen_busy": _median((s[:, mid, 3] - s[:, mid, 1]).flatten()),
        "mma_wait_w": _median((s[:, mid, 4] - s[:, prev, 7]).flatten()),
        "qk": _median((s[:, mid, 5] - s[:, mid, 4]).flatten()),
        "softmax_p": _median((s[:, mid, 6] - s[:, mid, 5]).flatten()),
        "pv": _median((s[:, mid, 7] - s[:, mid, 6]).flatten()),
        "second_half_arrival_after_issue": _median((s[:, mid, 2] - s[:, mid, 0]).flatten()),
    }
    return {"case": [case.batch, case.keys], "workers": workers, "programs_stamped": int(ok.sum()),
            "calls": used, "relative_to_issue_us": rel, "phases_us": phases,
            "raw_call": stamps[used // 2].cpu().tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N (16 heads, one token, FP8)")
    parser.add_argument("--workers", type=int, default=0, help="0: the SM count")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--set", action="append", default=[],
                        help="NAME=VALUE: set the launcher's constant WS16_<NAME> (e.g. WIDEN_MODE=1)")
    parser.add_argument("--json")
    args = parser.parse_args()
    from pagedmla.ops import _triton_decode
    for item in args.set:
        name, value = item.split("=")
        setattr(_triton_decode, f"WS16_{name.upper()}", int(value))
    workers = args.workers or torch.cuda.get_device_properties(0).multi_processor_count
    reports = []
    for text in args.case or ["64,4096"]:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        rep = timeline(case, workers, max(args.calls, 3 * len(case.items)))
        reports.append(rep)
        print(f"case B{b} N{n} W{workers}: {rep['programs_stamped']} programs stamped {NB} blocks, "
              f"{rep['calls']} calls")
        for name, vals in rep["relative_to_issue_us"].items():
            print(f"  {name:14s} " + " ".join(f"{v:7.2f}" for v in vals))
        print("  phases (us, medians of blocks 2+): " + ", ".join(f"{k} {v}" for k, v in rep["phases_us"].items()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
