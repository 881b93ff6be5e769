"""Timeline of the 16-row ring decode kernel's programs inside a CUDA graph of back-to-back decode calls.

    PYTHONPATH=src python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 [--case ...] [--json F]

Where does a call's fixed cost go (BENCHMARKS.md: ~12 us per call beyond the streaming time at 16 heads)? This
loads a copy of `pagedmla.kernels.mla_decode_ring` with time stamps added (source patched at run time, so the
library's kernel keeps no instrumentation), swaps it into the launcher, captures `--calls` decode calls in one
graph and replays it. Each program records `%globaltimer` (ns, common to all SMs) at: entry, after the wait for
the previous kernel, its first piece's prologue, the first piece's loop start (q staged) and end, and exit.
For a middle call, the report gives percentiles of each stamp relative to the earliest post-wait stamp of that
call, and the gap from the call's last program exit to the next call's earliest post-wait stamp (the combine,
plus launch latencies). Not a harness: times are only the ones the stamps see.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case
from stamped_kernels import SourcePatch, load_patched, pct, replay_stamped, stamp_helper

STAMPS = ["entry", "post_wait", "prologue", "loop_start", "loop_end", "exit"]  # slot 6: the SM id
WIDTH = 8  # int64 slots per program

_HELPER = stamp_helper(WIDTH, 6, "w")  # slot 6: the SM id


def _patched_source() -> str:
    import pagedmla.kernels.mla_decode_ring as ring
    patch = SourcePatch(pathlib.Path(ring.__file__).read_text())
    sub = patch.sub

    sub("from .gluon_common", "from pagedmla.kernels.gluon_common")
    sub("from .mla_sparse_decode_ring", "from pagedmla.kernels.mla_sparse_decode_ring")
    sub("\n\n@gluon.jit\ndef _stage_q", _HELPER + "\n\n@gluon.jit\ndef _stage_q")
    # the kernel gets the stamp buffer after scales_ptr; _decode_sequence gets it last
    sub("    sink_ptr, blocks_ptr, rope_ptr, scales_ptr,\n", "    sink_ptr, blocks_ptr, rope_ptr, scales_ptr, stamps_ptr,\n")
    sub("NUM_SLOTS: gl.constexpr):\n    \"\"\"Worker w's piece", "NUM_SLOTS: gl.constexpr, stamps_ptr):\n"
        "    \"\"\"Worker w's piece")
    sub("PAGE_SIZE, ROPE_OFF, HAS_SINK, NUM_SLOTS)\n", "PAGE_SIZE, ROPE_OFF, HAS_SINK, NUM_SLOTS, stamps_ptr)\n")
    sub("    w = gl.program_id(0)\n", "    w = gl.program_id(0)\n    _stamp(stamps_ptr, w, 0)\n")
    sub("    wait_for_prior_grid(w)\n", "    wait_for_prior_grid(w)\n    _stamp(stamps_ptr, w, 1)\n")
    sub("        gl.thread_barrier()\n        _ring_prologue(",
        "        gl.thread_barrier()\n        if b == first_seq:\n            _stamp(stamps_ptr, w, 2)\n"
        "        _ring_prologue(")
    sub("        q_rope = qr_s.load(", "        if b == first_seq:\n            _stamp(stamps_ptr, w, 3)\n"
        "        q_rope = qr_s.load(")
    sub("        l_i, has, lse = _row_lse(m_i, l_cols)\n",
        "        if b == first_seq:\n            _stamp(stamps_ptr, w, 4)\n"
        "        l_i, has, lse = _row_lse(m_i, l_cols)\n")
    sub("        b += 1\n", "        b += 1\n    _stamp(stamps_ptr, w, 5)\n")
    return patch.src


def _load_stamped_kernel():
    return load_patched("mla_decode_ring_stamped", _patched_source())._mla_decode_ring_kernel


def _by_sm(s: torch.Tensor) -> dict:
    """First-piece loop times grouped by how many programs shared the SM, and the spread of SMs' means."""
    loop = (s[:, 4] - s[:, 3]).double() / 1000
    sms = s[:, 6]
    count = torch.bincount(sms, minlength=int(sms.max()) + 1)[sms]
    out = {}
    for k in sorted(set(count.tolist())):
        sel = loop[count == k]
        out[f"{k}_per_sm"] = {"programs": len(sel), "mean_loop_us": round(float(sel.mean()), 2),
                              "max_loop_us": round(float(sel.max()), 2)}
    means = torch.zeros(int(sms.max()) + 1, dtype=torch.float64).index_add_(0, sms, loop)
    means = means / torch.bincount(sms, minlength=len(means)).clamp(min=1)
    used = means[torch.bincount(sms, minlength=len(means)) > 0]
    out["sm_mean_loop_us"] = pct(used * 1000)
    # SMs in groups of 16 ids: does the loop time follow the SM's place on the chip?
    out["by_sm_id_16"] = [round(float(used[i:i + 16].mean()), 1) for i in range(0, len(used), 16)]
    return out


def timeline(case: Case, calls: int, workers: int | None = None) -> dict:
    plan = case.plan(workers)
    num_workers = plan.schedule.shape[0] - 1 - case.batch
    stamps = torch.zeros(calls, num_workers, WIDTH, dtype=torch.int64, device="cuda")
    used = replay_stamped(case, plan, "_mla_decode_ring_kernel", _load_stamped_kernel(), stamps, 13, calls)
    report = {"case": [case.batch, case.keys, case.heads, case.q_len, case.fp8], "workers": num_workers,
              "calls": used, "per_call": []}
    for k in range(1, used - 1):
        s = stamps[k].cpu()
        t0 = int(s[:, 1].min())
        row = {name: pct(s[:, i] - t0) for i, name in enumerate(STAMPS)}
        row["first_piece_loop_us"] = pct(s[:, 4] - s[:, 3])
        row["call_us"] = round((int(s[:, 5].max()) - t0) / 1000, 2)
        nxt = stamps[k + 1].cpu()
        row["gap_to_next_us"] = round((int(nxt[:, 1].min()) - int(s[:, 5].max())) / 1000, 2)
        row["next_entry_vs_exit_us"] = pct(nxt[:, 0] - int(s[:, 5].max()))
        row["by_sm"] = _by_sm(s)
        report["per_call"].append(row)
    # one call's raw stamps (ns; column 6: the SM id) and the programs' schedule rows, for offline analysis
    report["raw_call"] = stamps[used // 2].cpu().tolist()
    report["schedule"] = plan.schedule[1:1 + num_workers].cpu().tolist()
    return report


def sharing_bounds(report: dict) -> dict[str, float]:
    """From one call's raw stamps: the latest first-piece loop end as run, and what it would have been had
    programs shared their blocks (each group finishing when its summed block rate has done the group's blocks,
    rates as measured): pairs (w, w + d), co-resident pairs, quads of consecutive ids, and all programs. Upper
    bounds of what dynamic work sharing could gain (us after the first post-wait stamp)."""
    raw = report["raw_call"]
    n = len(raw)
    t0 = min(r[1] for r in raw)
    start = [(r[3] - t0) / 1000 for r in raw]
    end = [(r[4] - t0) / 1000 for r in raw]
    rate = [1 / (e - s) for s, e in zip(start, end)]  # pieces per us (a piece: the program's first)

    def finish(groups):
        return round(max(max(start[i] for i in g) + len(g) / sum(rate[i] for i in g) for g in groups), 2)

    out = {"as_run": round(max(end), 2)}
    for d in (1, 64, 132):
        used, groups = set(), []
        for i in range(n):
            if i not in used:
                g = (i, i + d) if i + d < n and i + d not in used else (i,)
                used.update(g)
                groups.append(g)
        out[f"pairs_w_w+{d}"] = finish(groups)
    by_sm: dict[int, list[int]] = {}
    for i, r in enumerate(raw):
        by_sm.setdefault(r[6], []).append(i)
    out["pairs_same_sm"] = finish(list(by_sm.values()))
    out["quads"] = finish([tuple(range(i, min(n, i + 4))) for i in range(0, n, 4)])
    out["all"] = finish([tuple(range(n))])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H,q[,fp8]")
    parser.add_argument("--bounds", help="print `sharing_bounds` of a JSON this script wrote, and exit")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--workers", type=int, default=None, help="plan this many workers (default: the heuristic's)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.bounds:
        for rep in json.loads(pathlib.Path(args.bounds).read_text()):
            print(rep["case"], sharing_bounds(rep))
        return
    reports = []
    for text in args.case:
        parts = text.split(",")
        b, n, h, q = (int(x) for x in parts[:4])
        case = Case(b, n, h, q, fp8="fp8" in parts[4:])
        rep = timeline(case, max(args.calls, 3 * len(case.items)), args.workers)
        reports.append(rep)
        print(f"case {text}: {rep['workers']} workers, {rep['calls']} calls")
        for row in rep["per_call"][1:3]:
            print(f"  call {row['call_us']} us, gap to next call's first post-wait {row['gap_to_next_us']} us")
            for name in STAMPS[1:] + ["first_piece_loop_us", "next_entry_vs_exit_us", "by_sm"]:
                print(f"    {name:22s} {row[name]}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
