"""Milestones of the register-operand 16-row FP8 decode (`pagedmla.kernels.mla_decode_ws16_rs`) in a call: where
a call's time goes outside its steady stream of blocks (its start and its end), per consumer, inside a CUDA
graph of back-to-back calls.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/rs_timeline.py [--case 64,4096] [--workers 0] [--json F]

Like `ws16_timeline.py`: a copy of the kernel module with `%globaltimer` stamps patched into its source is swapped
into the launcher (workers: 0 takes the plan's own count). Each consumer stamps, for its program's last piece:
its wait for the previous kernel passed (`start`), q arrived, q widened, its first block of the piece arrived
and done, its last block arrived and done, the merge handed over (consumer 1) or done (consumer 0), and the
piece's rows or partial written (`written`, consumer 0). Printed for a middle call: the
medians over programs of each stamp, in us after the call's earliest `start`, and the latest stamp.
`--warp-stamps`: each warp of consumer 1 stamps its q widening (q arrived, scaled, chunks stored, fenced). Not a
harness: times are only what the stamps see (16 heads, one token, FP8).
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
from stamped_kernels import SourcePatch, load_patched, replay_stamped, stamp_helper

WIDTH = 64  # int64 slots per program: consumer WG at 10 WG + k, the SM id at 31, warp stamps from 32
# `--warp-stamps`: per warp of consumer 1, in its q widening (slot 32 + 16 WG + 4 stage + warp)
WARP_STAGES = ["q_arrived", "q_scaled", "q_chunks", "q_fenced"]
WARP_HELPER = """

@gluon.jit
def _stamp_warps(ptr, w, k: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    lane = gl.arange(0, 128, layout)
    t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [lane], dtype=gl.int64, is_pure=False,
                                  pack=1)
    gl.store(ptr + w * WIDTH_ + k + lane // 32, t, mask=lane % 32 == 0)
"""
NAMES = ["start", "q_arrived", "q_widened", "first_block_in", "first_block_done", "last_block_in",
         "last_block_done", "merge", "written"]


def _patched_source(warp_stamps: bool = False) -> str:
    import pagedmla.kernels.mla_decode_ws16_rs as rs
    patch = SourcePatch(pathlib.Path(rs.__file__).read_text())
    sub = patch.sub
    for rel in ("gluon_common", "mla_decode_ws16", "mla_decode_ws"):
        sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    helpers = stamp_helper(WIDTH, 31, "w")
    if warp_stamps:
        helpers += WARP_HELPER.replace("WIDTH_", str(WIDTH))
    sub("\n\n@gluon.jit\ndef _consumer(", helpers + "\n\n@gluon.jit\ndef _consumer(")
    sub("SLOTS: gl.constexpr, WG: gl.constexpr):\n", "SLOTS: gl.constexpr, WG: gl.constexpr, stamps_ptr):\n")
    sub("HAS_SINK, SLOTS, 0)),", "HAS_SINK, SLOTS, 0, stamps_ptr)),")
    sub("HAS_SINK, SLOTS, 1)),", "HAS_SINK, SLOTS, 1, stamps_ptr)),")
    sub("    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr,\n",
        "    schedule_ptr, sink_ptr, part_out_ptr, part_lse_ptr, scales_ptr, stamps_ptr,\n")

    def stamp(k: int, indent: int, cond: str = "") -> str:
        pad = " " * indent
        call = f"_stamp(stamps_ptr, w, 10 * WG + {k})\n"
        return f"{pad}if {cond}:\n{pad}    {call}" if cond else pad + call

    sub("    wait_for_prior_grid(w)\n", "    wait_for_prior_grid(w)\n" + stamp(0, 4))
    if warp_stamps:
        def warps(stage: int) -> str:
            return f"                    _stamp_warps(stamps_ptr, w, 32 + 16 * WG + {4 * stage})\n"
        sub("                    up, down = _q_scale(q_s, col_l)\n",
            warps(0) + "                    up, down = _q_scale(q_s, col_l)\n" + warps(1))
        sub("                    qrp_s.index(qb).store(qr_s.load(", warps(2) + "                    qrp_s.index(qb).store(qr_s.load(")
        sub("                    mbarrier.arrive(q16_ready.index(qb))\n",
            warps(3) + "                    mbarrier.arrive(q16_ready.index(qb))\n")
    # q arrived: in q_s (consumer 1, which widens it) or widened (consumer 0); q widened: consumer 1 done
    # with it (consumer 0: its 2^-e read)
    sub("                    mbarrier.wait(q_ready, pieces & 1)\n",
        "                    mbarrier.wait(q_ready, pieces & 1)\n" + stamp(1, 20))
    sub("                    mbarrier.arrive(q_empty)\n", stamp(2, 20) + "                    mbarrier.arrive(q_empty)\n")
    sub("                    mbarrier.wait(q16_ready.index(qb), (pieces // 2) & 1)\n",
        "                    mbarrier.wait(q16_ready.index(qb), (pieces // 2) & 1)\n" + stamp(1, 20))
    sub("                    down = qd_s.index(qb).load(col_l)\n",
        "                    down = qd_s.index(qb).load(col_l)\n" + stamp(2, 20))
    first = "i == (c0 + WG) % 2"
    last = "i + 2 >= n_blocks"
    wait = "                    mbarrier.wait(k_ready.index((2 * c + 1) % SLOTS), ((2 * c + 1) // SLOTS) & 1)\n"
    sub(wait, wait + stamp(3, 20, first) + stamp(5, 20, last))
    done = "                    mbarrier.arrive(k_empty.index((2 * c + 1) % SLOTS))\n"
    sub(done, done + stamp(4, 20, first) + stamp(6, 20, last))
    sub("                    mbarrier.arrive(merge_full)\n", "                    mbarrier.arrive(merge_full)\n" + stamp(7, 20))
    sub("                    mbarrier.arrive(merge_empty)\n",
        "                    mbarrier.arrive(merge_empty)\n" + stamp(7, 20))
    sub("        c0 += n_blocks\n", stamp(8, 8, "active") + "        c0 += n_blocks\n")
    return patch.src


def timeline(case: Case, workers: int | None, calls: int, warp_stamps: bool = False) -> dict:
    from pagedmla.configs.decode import WS16
    from pagedmla.ops import _triton_decode
    plan = case.plan(workers)
    n_workers = plan.num_partitions
    stamps = torch.zeros(calls, n_workers, WIDTH, dtype=torch.int64, device="cuda")
    kernel = load_patched(f"mla_decode_ws16_rs_stamped_{int(warp_stamps)}",
                          _patched_source(warp_stamps))._mla_decode_ws16_rs_kernel
    run = case.run
    case.run = lambda p, cfg, combine=None: run(p, WS16, combine)
    before = _triton_decode.WS16_KERNEL
    _triton_decode.WS16_KERNEL = "registers"
    try:
        used = replay_stamped(case, plan, "_mla_decode_ws16_rs_kernel", kernel, stamps, 14, calls)
    finally:
        case.run = run
        _triton_decode.WS16_KERNEL = before
    s = stamps[used // 2].cpu()
    t0 = int(s[:, 0][s[:, 0] > 0].min())
    report = {}
    for wg in (0, 1):
        for k, name in enumerate(NAMES):
            col = s[:, 10 * wg + k]
            col = col[col > 0]
            if len(col):
                rel = (col - t0).double() / 1000
                report[f"c{wg}.{name}"] = {"median": round(statistics.median(rel.tolist()), 2),
                                          "max": round(float(rel.max()), 2), "programs": len(col)}
    report["latest"] = {"median": round((int(s[:, :31].max()) - t0) / 1000, 2), "max": 0.0, "programs": 1}
    if warp_stamps:
        for wg in (0, 1):
            for stage, name in enumerate(WARP_STAGES):
                for warp in range(4):
                    col = s[:, 32 + 16 * wg + 4 * stage + warp]
                    col = col[col > 0]
                    if len(col):
                        rel = (col - t0).double() / 1000
                        report[f"c{wg}.w{warp}.{name}"] = {"median": round(statistics.median(rel.tolist()), 2),
                                                          "max": round(float(rel.max()), 2), "programs": len(col)}
    return {"case": [case.batch, case.keys], "workers": n_workers, "calls": used,
            "us_after_first_start": report, "raw_call": s.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N (16 heads, one token, FP8)")
    parser.add_argument("--workers", type=int, default=0, help="0: the plan's own count")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--warp-stamps", action="store_true",
                        help="stamp each warp of consumer 1's q widening (q arrived, scaled, chunks stored, fenced)")
    parser.add_argument("--json")
    args = parser.parse_args()
    reports = []
    for text in args.case or ["64,4096"]:
        b, n = (int(x) for x in text.split(","))
        case = Case(b, n, 16, 1, fp8=True)
        rep = timeline(case, args.workers or None, max(args.calls, 3 * len(case.items)), args.warp_stamps)
        reports.append(rep)
        print(f"case B{b} N{n} W{rep['workers']}: {rep['calls']} calls (us after the call's first start: "
              f"median over programs / latest)")
        for name, v in rep["us_after_first_start"].items():
            print(f"  {name:20s} {v['median']:8.2f} {v['max']:8.2f}  ({v['programs']} programs)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
