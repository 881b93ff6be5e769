"""Timeline of the warp-specialized (64-row) decode kernel's programs inside a CUDA graph of back-to-back calls.

    PYTHONPATH=src python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 [--case ...] [--json F]

Where does batch 1 at 128 heads spend its ~21 us of kernel time (BENCHMARKS.md)? Like `ring_timeline.py`, this
loads a copy of `pagedmla.kernels.mla_decode_ws` with `%globaltimer` stamps added (source patched at run time),
swaps it into the launcher, captures `--calls` decode calls in one graph and replays it. Each program records:
entry (before its shared memory is set up), consumer 0's time after the wait for the previous kernel, after it
issued its first block's copies (the schedule, lengths and table entry loaded), after q arrived, after its
first block's logits (the first block arrived), at the end of its first piece's key loop, after its epilogue's
stores were issued, and consumer 1's after its own; in consumer 0's first epilogue of a partial tile, after its
waits, after its last quarter is staged and stored, and after the TMA stores have read the tiles. Reported per
middle call: percentiles of each stamp relative to the call's earliest post-wait stamp, and the gap from the
call's last stamp to the next call's earliest post-wait stamp (the combine and launch latencies). Not a
harness: times are only the ones the stamps see.
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

STAMPS = ["entry", "post_wait", "first_copy", "q_ready", "first_logits", "loop_end", "exit_c0", "exit_c1"]
# consumer 0's first epilogue of a partial tile (slots 9-11; slot 8 holds the SM): its waits passed, its last
# quarter staged and its store issued, the stores' reads of the tiles done
EPI_STAMPS = {"epi_waited": 9, "epi_staged": 10, "epi_stored": 11}
SM_SLOT = 8
WIDTH = 12  # int64 slots per program

_HELPER = stamp_helper(WIDTH, SM_SLOT, "gl.program_id(0)")


def _patched_source(no_stores: bool = False) -> str:
    """The kernel's source with the stamps; `no_stores`: the output and partial tiles' register stores (the
    epilogue without TMA_OUT) predicated off (a runtime-false mask, so their values are still computed and the
    instructions still issue: what is left of the epilogue without their memory traffic)."""
    import pagedmla.kernels.mla_decode_ws as ws
    patch = SourcePatch(pathlib.Path(ws.__file__).read_text())
    sub = patch.sub

    sub("from .gluon_common", "from pagedmla.kernels.gluon_common")
    sub("\n\n@gluon.jit\ndef _visible(", _HELPER + "\n\n@gluon.jit\ndef _visible(")
    # the kernel takes the stamp buffer after part_lse_ptr; each consumer takes it last
    sub("    sink_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc,\n",
        "    sink_ptr, part_out_ptr, part_lse_ptr, out_desc, po_desc, stamps_ptr,\n")
    sub("HAS_SINK: gl.constexpr, TMA_OUT: gl.constexpr):\n", "HAS_SINK: gl.constexpr, TMA_OUT: gl.constexpr, stamps_ptr):\n")
    sub("HAS_SINK, TMA_OUT)),\n", "HAS_SINK, TMA_OUT, stamps_ptr)),\n", count=2)
    sub("    pid = gl.program_id(0)\n    w = pid // num_tiles\n",
        "    pid = gl.program_id(0)\n    _stamp(stamps_ptr, 0)\n    w = pid // num_tiles\n")
    sub("    wait_for_prior_grid(w)\n", "    wait_for_prior_grid(w)\n    if C == 0:\n        _stamp(stamps_ptr, 1)\n")
    sub("                mbarrier.wait(q_ready, pieces & 1)\n",
        "                if C == 0:\n                    if pieces == 0:\n                        _stamp(stamps_ptr, 2)\n"
        "                mbarrier.wait(q_ready, pieces & 1)\n                if C == 0:\n"
        "                    if pieces == 0:\n                        _stamp(stamps_ptr, 3)\n")
    # consumer 0's epilogue (`_stage_and_store`): its waits passed, its tile staged, the store's read of it done
    sub("def _stage_and_store(C: gl.constexpr, out,", "def _stage_and_store(C: gl.constexpr, stamps_ptr, out,")
    sub("_stage_and_store(C, out,", "_stage_and_store(C, stamps_ptr, out,")
    sub("            mbarrier.wait(q_empty, (pieces - 1) & 1)\n",
        "            mbarrier.wait(q_empty, (pieces - 1) & 1)\n        if epis == 0:\n"
        "            _stamp(stamps_ptr, 9)\n")
    store = "            tma.async_copy_shared_to_global(po_desc, [po_row, COLS * C + QUARTER * i], tile)\n"
    sub(store, store + "            if (C == 0) & (i == 3):\n                if epis == 0:\n"
        "                    _stamp(stamps_ptr, 10)\n")
    waited = "    tma.store_wait(0)\n    gl.thread_barrier()"
    sub(waited, "    tma.store_wait(0)\n    if C == 0:\n        if epis == 0:\n            _stamp(stamps_ptr, 11)\n"
        "    gl.thread_barrier()")
    sub("lo_max, hi_min, qk_scale)\n                        m_a = gl.maximum(m_i, gl.max(s, axis=1))\n",
        "lo_max, hi_min, qk_scale)\n                        if (pieces == 0) & (j == 0):\n"
        "                            _stamp(stamps_ptr, 4)\n"
        "                        m_a = gl.maximum(m_i, gl.max(s, axis=1))\n")
    sub("                pieces += 1\n",
        "                if C == 0:\n                    if pieces == 0:\n                        _stamp(stamps_ptr, 5)\n"
        "                pieces += 1\n")
    # the consumer's last statement ends just before the kernel's comment block
    sub("\n\n\n# like `_mla_decode_kernel`", "\n    _stamp(stamps_ptr, 6 + C)\n\n\n# like `_mla_decode_kernel`")
    if no_stores:
        sub("out.to(out_ptr.dtype.element_ty), mask=r_ok)", "out.to(out_ptr.dtype.element_ty), mask=r_ok & (w < 0))")
        sub("mask=r_ok, eviction_policy=\"evict_last\")", "mask=r_ok & (w < 0), eviction_policy=\"evict_last\")")
    return patch.src


def _load_stamped_kernel(no_stores: bool = False):
    return load_patched("mla_decode_ws_stamped", _patched_source(no_stores))._mla_decode_ws_kernel


def timeline(case: Case, calls: int, no_stores: bool = False) -> dict:
    plan = case.plan()
    num_workers = plan.schedule.shape[0] - 1 - case.batch
    programs = num_workers * ((case.heads * case.q_len + 63) // 64)
    stamps = torch.zeros(calls, programs, WIDTH, dtype=torch.int64, device="cuda")
    used = replay_stamped(case, plan, "_mla_decode_ws_kernel", _load_stamped_kernel(no_stores), stamps, 15, calls)
    if used == 0:
        raise RuntimeError("the case did not run the warp-specialized kernel")
    report = {"case": [case.batch, case.keys, case.heads, case.q_len], "programs": programs, "calls": used,
              "no_stores": no_stores, "per_call": []}
    for k in range(1, used - 1):
        s = stamps[k].cpu()
        t0 = int(s[:, 1].min())
        row = {name: pct(s[:, i] - t0) for i, name in enumerate(STAMPS)}
        for name, i in EPI_STAMPS.items():
            got = s[:, i] > 0  # unset where the first epilogue wrote a whole sequence's rows
            row[name] = pct(s[got, i] - t0) if bool(got.any()) else None
        row["first_block_wait_us"] = pct(s[:, 4] - s[:, 2])
        row["loop_us"] = pct(s[:, 5] - s[:, 3])
        row["epilogue_us"] = pct(s[:, 6] - s[:, 5])
        last = int(s[:, 6:8].max())
        row["call_us"] = round((last - t0) / 1000, 2)
        nxt = stamps[k + 1].cpu()
        row["gap_to_next_us"] = round((int(nxt[:, 1].min()) - last) / 1000, 2)
        row["next_entry_vs_last_exit_us"] = pct(nxt[:, 0] - last)
        report["per_call"].append(row)
    report["raw_call"] = stamps[used // 2].cpu().tolist()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H,q")
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--no-stores", action="store_true",
                        help="predicate off the output and partial stores (the answers are then not written)")
    parser.add_argument("--json")
    args = parser.parse_args()
    reports = []
    for text in args.case:
        b, n, h, q = (int(x) for x in text.split(","))
        case = Case(b, n, h, q)
        rep = timeline(case, max(args.calls, 3 * len(case.items)), args.no_stores)
        reports.append(rep)
        print(f"case {text}: {rep['programs']} programs, {rep['calls']} calls"
              + (", stores predicated off" if args.no_stores else ""))
        for row in rep["per_call"][1:3]:
            print(f"  call {row['call_us']} us, gap to next call's first post-wait {row['gap_to_next_us']} us")
            for name in STAMPS + list(EPI_STAMPS) + ["first_block_wait_us", "loop_us", "epilogue_us",
                                                     "next_entry_vs_last_exit_us"]:
                print(f"    {name:26s} {row[name]}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
