"""Timeline of the warp-specialized (64-row) decode kernel's programs inside a CUDA graph of back-to-back calls.

    PYTHONPATH=src python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 [--case ...] [--json F]

Where does batch 1 at 128 heads spend its ~21 us of kernel time (BENCHMARKS.md)? Like `ring_timeline.py`, this
loads a copy of `pagedmla.kernels.mla_decode_ws` with `%globaltimer` stamps added (source patched at run time),
swaps it into the launcher, captures `--calls` decode calls in one graph and replays it. Each program records:
entry (before its shared memory is set up), consumer 0's time after the wait for the previous kernel, after it
issued its first block's copies (the schedule, lengths and table entry loaded), after q arrived, after its
first block's logits (the first block arrived), at the end of its first piece's key loop, after its epilogue's
stores were issued, and consumer 1's after its own. Reported per middle call: percentiles of each stamp relative
to the call's earliest post-wait stamp, and the gap from the call's last stamp to the next call's earliest
post-wait stamp (the combine and launch latencies). Not a harness: times are only the ones the stamps see.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case

from pagedmla.ops import _triton_decode

STAMPS = ["entry", "post_wait", "first_copy", "q_ready", "first_logits", "loop_end", "exit_c0", "exit_c1"]
SM_SLOT = 8
WIDTH = 10  # int64 slots per program

_HELPER = '''

@gluon.jit
def _stamp(ptr, k: gl.constexpr):
    pid = gl.program_id(0)
    t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=gl.int64, is_pure=False,
                                  pack=1)
    gl.store(ptr + pid * 10 + k, t)
    if k == 0:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=gl.int32, is_pure=False, pack=1)
        gl.store(ptr + pid * 10 + 8, sm.to(gl.int64))
'''


def _patched_source(no_stores: bool = False) -> str:
    """The kernel's source with the stamps; `no_stores`: the output and partial tiles' register stores (the
    epilogue without TMA_OUT) predicated off (a runtime-false mask, so their values are still computed and the
    instructions still issue: what is left of the epilogue without their memory traffic)."""
    import pagedmla.kernels.mla_decode_ws as ws
    src = pathlib.Path(ws.__file__).read_text()

    def sub(old: str, new: str, count: int = 1) -> None:
        nonlocal src
        if src.count(old) != count:
            raise RuntimeError(f"patch point {old!r} found {src.count(old)} times, expected {count}")
        src = src.replace(old, new)

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
    sub("                    mbarrier.wait(q_empty, (pieces & 1) ^ 1)\n",
        "                    if pieces == 0:\n                        _stamp(stamps_ptr, 2)\n"
        "                    mbarrier.wait(q_empty, (pieces & 1) ^ 1)\n")
    sub("                mbarrier.wait(q_ready, pieces & 1)\n",
        "                mbarrier.wait(q_ready, pieces & 1)\n                if C == 0:\n"
        "                    if pieces == 0:\n                        _stamp(stamps_ptr, 3)\n")
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
    return src


def _load_stamped_kernel(no_stores: bool = False):
    path = pathlib.Path(tempfile.mkdtemp()) / "mla_decode_ws_stamped.py"
    path.write_text(_patched_source(no_stores))
    spec = importlib.util.spec_from_file_location("mla_decode_ws_stamped", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module._mla_decode_ws_kernel


class _Swap:
    """Stands in for the launcher's kernel: each launch gets the next call's stamp rows."""

    def __init__(self, kernel, stamps: torch.Tensor):
        self.kernel, self.stamps, self.calls = kernel, stamps, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            buf = self.stamps[self.calls % self.stamps.shape[0]]
            self.calls += 1
            return self.kernel[grid](*args[:15], buf, *args[15:], **kwargs)
        return launch


def _pct(values: torch.Tensor) -> dict[str, float]:
    v = values.double().sort().values
    pick = [0.0, 0.1, 0.5, 0.9, 1.0]
    return {f"p{int(p * 100)}": round(float(v[min(len(v) - 1, int(p * (len(v) - 1)))]) / 1000, 2) for p in pick}


def timeline(case: Case, calls: int, no_stores: bool = False) -> dict:
    plan = case.plan()
    num_workers = plan.schedule.shape[0] - 1 - case.batch
    programs = num_workers * ((case.heads * case.q_len + 63) // 64)
    stamps = torch.zeros(calls, programs, WIDTH, dtype=torch.int64, device="cuda")
    original = _triton_decode._mla_decode_ws_kernel
    swap = _Swap(_load_stamped_kernel(no_stores), stamps)
    _triton_decode._mla_decode_ws_kernel = swap
    try:
        one = case.run(plan, None)
        one()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        swap.calls = 0
        with torch.cuda.graph(graph):
            for _ in range(calls // len(case.items)):
                one()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    finally:
        _triton_decode._mla_decode_ws_kernel = original
    used = swap.calls
    if used == 0:
        raise RuntimeError("the case did not run the warp-specialized kernel")
    report = {"case": [case.batch, case.keys, case.heads, case.q_len], "programs": programs, "calls": used,
              "no_stores": no_stores, "per_call": []}
    for k in range(1, used - 1):
        s = stamps[k].cpu()
        t0 = int(s[:, 1].min())
        row = {name: _pct(s[:, i] - t0) for i, name in enumerate(STAMPS)}
        row["first_block_wait_us"] = _pct(s[:, 4] - s[:, 2])
        row["loop_us"] = _pct(s[:, 5] - s[:, 3])
        row["epilogue_us"] = _pct(s[:, 6] - s[:, 5])
        last = int(s[:, 6:8].max())
        row["call_us"] = round((last - t0) / 1000, 2)
        nxt = stamps[k + 1].cpu()
        row["gap_to_next_us"] = round((int(nxt[:, 1].min()) - last) / 1000, 2)
        row["next_entry_vs_last_exit_us"] = _pct(nxt[:, 0] - last)
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
            for name in STAMPS + ["first_block_wait_us", "loop_us", "epilogue_us", "next_entry_vs_last_exit_us"]:
                print(f"    {name:26s} {row[name]}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(reports, indent=1))


if __name__ == "__main__":
    main()
