"""The decode kernels launched as programmatic dependents wait before they touch memory, and the 16-row FP8
kernel fences the async proxy before it releases a slot to TMA (CPU tier).

On Hopper the dense and sparse decode kernels and their combines are launched with `launch_pdl`: a kernel may
start while the one before it still runs, so it must execute `griddepcontrol.wait` before its first global
load, store, atomic or copy (docs/layout.md, "Programmatic dependent launch"). The gpu tier tests this with a
late writer; this test checks it on every path of the compiled code, without a GPU: each kernel is compiled for
sm_90a (`scripts/compile_sm90.py`, the Triton wheel's own ptxas) and its PTX control-flow graph is walked from the
entry; every global memory instruction must be dominated by an unpredicated wait. In the warp-specialized
kernels every partition's code is on some path from the entry, so each partition needs its own wait.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# global memory: loads, stores, atomics and reductions, asynchronous and bulk (TMA) copies, prefetches
GLOBAL_OP = re.compile(r"\b(ld\.global|st\.global|atom\.|red\.|cp\.async\.c[ag]|cp\.async\.bulk|cp\.reduce|"
                       r"prefetch\.global)")
WAIT = "griddepcontrol.wait"
LABEL = re.compile(r"^(\$L__\w+):")
BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+)")

# (case of scripts/cases_sm90.py, what it is)
CASES = [
    ("decode-ring-s2", "dense Gluon ring kernel, bf16"),
    ("decode-ring-s2-fp8", "dense Gluon ring kernel, rope-aware FP8"),
    ("decode-ws", "dense warp-specialized Gluon kernel"),
    ("decode-ws16", "dense warp-specialized 16-row Gluon kernel, rope-aware FP8"),
    ("decode-ws16-rs", "dense warp-specialized 16-row Gluon kernel with register operands, rope-aware FP8"),
    ("decode-bf16-h16", "dense Triton kernel"),
    ("decode-fp8-h128", "dense Triton kernel, FP8"),
    ("combine-p2-r4-dv512-w4", "dense combine"),
    ("sparse-ring-s2", "sparse Gluon ring kernel"),
    ("sparse-ring-s2-fp8", "sparse Gluon ring kernel, rope-aware FP8"),
    ("sparse-ws", "sparse warp-specialized Gluon kernel"),
    ("sparse-bf16-h16", "sparse Triton kernel"),
    ("sparse-combine", "sparse combine"),
]


def unwaited_global_ops(ptx: str) -> tuple[int, list[str]]:
    """(global memory instructions reachable from the entry, those reachable on some path without a wait)."""
    body = ptx[ptx.index(".entry"):].splitlines()
    blocks: list[tuple[str, list[str]]] = [("entry", [])]
    for raw in body:
        line = raw.split("//")[0].strip()
        label = LABEL.match(line)
        if label:
            blocks.append((label.group(1), []))
            continue
        if line:
            blocks[-1][1].append(line)
            # a branch or exit ends the block; what follows starts an unnamed one
            if BRANCH.search(line) or re.match(r"^(@!?%p\d+\s+)?(ret|exit|trap)\b", line):
                blocks.append((f"after-{len(blocks)}", []))
    names = [name for name, _ in blocks]
    succ: dict[str, list[str]] = {}
    for i, (name, lines) in enumerate(blocks):
        nxt, falls = [], True
        if lines:
            last = lines[-1]
            target = BRANCH.search(last)
            if target:
                nxt.append(target.group(1))
                falls = last.startswith("@")
            if re.match(r"^(ret|exit|trap)\b", last):
                falls = False
        if falls and i + 1 < len(blocks):
            nxt.append(names[i + 1])
        succ[name] = nxt
    # forward search over (block, waited yet): a global op seen in the "not waited" state is unwaited
    code = dict(blocks)
    seen, stack, count, bad = set(), [("entry", False)], set(), set()
    while stack:
        name, waited = stack.pop()
        if (name, waited) in seen:
            continue
        seen.add((name, waited))
        for line in code[name]:
            if WAIT in line and not line.startswith("@"):
                waited = True
            elif GLOBAL_OP.search(line):
                count.add((name, line))
                if not waited:
                    bad.add((name, line))
        stack.extend((s, waited) for s in succ[name])
    return len(count), sorted(line for _, line in bad)


# compiles each case for sm_90a and writes its PTX and TTGIR to <dir>/<case>.ptx / .ttgir (run in a process of its
# own: the CPU tier's interpreter flag replaces the kernels with interpreted functions, which do not compile)
_COMPILE = """
import sys
import cases_sm90
from compile_sm90 import compile_kernel
out = sys.argv[1]
for case in sys.argv[2:]:
    fn, types, constexprs, warps, stages = cases_sm90.CASES[case]()
    asm = compile_kernel(fn, types, constexprs, warps, stages).asm
    for kind in ("ptx", "ttgir"):
        with open(f"{out}/{case}.{kind}", "w") as f:
            f.write(asm[kind])
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    pytest.importorskip("triton.experimental.gluon")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("ptx")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), str(root / "scripts"), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", _COMPILE, str(out), *(case for case, _ in CASES)], check=False,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return lambda case, kind="ptx": (out / f"{case}.{kind}").read_text()


@pytest.mark.parametrize("case,what", CASES, ids=[c for c, _ in CASES])
def test_no_global_access_before_the_wait(case, what, compiled):
    ptx = compiled(case)
    count, bad = unwaited_global_ops(ptx)
    assert count > 0, f"{what}: no global memory instruction found (is the pattern still right?)"
    assert not bad, f"{what}: global memory reachable before griddepcontrol.wait: {bad[:5]}"


def test_the_check_finds_a_missing_wait(compiled):
    """Without its waits, every global access of the warp-specialized kernel (both partitions) is flagged."""
    ptx = compiled("sparse-ws")
    count, _ = unwaited_global_ops(ptx)
    stripped = "\n".join(line for line in ptx.splitlines() if WAIT not in line)
    _, bad = unwaited_global_ops(stripped)
    assert len(bad) == count > 0


# ---------------------------------------------------------------- proxy fences of the 16-row FP8 kernel

FENCE = "ttng.fence_async_shared"
SMEM_LOAD = "ttg.local_load"
RELEASE = "ttng.arrive_barrier"
BARRIER = "gpu.barrier"
PARTITION = re.compile(r"^\s*partition\d+\(.*\) num_warps\((\d+)\) \{$")


def partition(ttgir: str, warps: int) -> list[str]:
    """The lines of the kernel's first warp-specialized worker partition of `warps` warps."""
    lines = ttgir.splitlines()
    start = next(i for i, line in enumerate(lines) if (m := PARTITION.match(line)) and int(m.group(1)) == warps)
    end = next((i for i in range(start + 1, len(lines)) if PARTITION.match(lines[i])), len(lines))
    return lines[start:end]


def releases_after_unfenced_loads(lines: list[str]) -> tuple[int, list[int]]:
    """(barrier arrivals with shared loads before them, the indices of those with no proxy fence followed by a
    barrier between the nearest such load and the arrival: the arriving thread stands for the others, so every
    warp must have fenced its own loads before the barrier it passes). Scanned backwards in the text's order,
    which is program order except across a loop's back edge: the loads of one iteration that a release at the
    top of the next covers come after it in the text, so such a release must have its fence and barrier right
    before it (as `_release_slot` does). Not seen: a load of a slot placed after that slot's release."""
    after_loads, bad = 0, []
    for i, line in enumerate(lines):
        if RELEASE not in line:
            continue
        fenced = barrier = False
        for prev in reversed(lines[:i]):
            if BARRIER in prev:
                barrier = True
            elif FENCE in prev:
                fenced = fenced or barrier
            elif SMEM_LOAD in prev:
                after_loads += 1
                if not fenced:
                    bad.append(i)
                break
    return after_loads, bad


# releases the swapped-fence self-test cannot flag: consumer 1's merge hand-over (`merge_full`, ordinary stores
# only) has a barrier of its own after the block loop's fence, so a fence moved after the loop's barrier still
# comes before a barrier for it
UNSWAPPABLE = {"decode-ws16": 0, "decode-ws16-rs": 1}


@pytest.mark.parametrize("case", list(UNSWAPPABLE))
def test_ws16_fences_before_it_releases_a_slot(case, compiled):
    """The 16-row FP8 kernels read each ring slot with ordinary shared loads (the widen warps of
    `mla_decode_ws16`, the consumers of `mla_decode_ws16_rs`) and release it to the loader, whose next TMA copy
    (the async proxy) writes it: a `fence_async_shared` must come between. Without it the results came out wrong
    now and then on the H200 (BENCHMARKS.md, twentieth session). In the worker partition of 4 warps (the widen
    warps; consumer 1; TTGIR, where partitions are regions of their own), every arrival that follows shared loads
    must have the fence after them and then a barrier; with the fences taken out, or each moved after its
    barrier, the check flags them. (Consumer 0, the default partition, runs the same function.)"""
    widen = partition(compiled(case, "ttgir"), 4)
    found, bad = releases_after_unfenced_loads(widen)
    assert found >= 3, "fewer releases after shared loads than the loop has (is the pattern still right?)"
    assert not bad, f"arrivals after shared loads without a proxy fence at partition lines {bad}"
    stripped = [line for line in widen if FENCE not in line]
    assert len(releases_after_unfenced_loads(stripped)[1]) == found, "the check does not see a missing fence"
    swapped = list(widen)  # each fence after its barrier instead of before
    for k in range(len(swapped) - 1):
        if FENCE in swapped[k] and BARRIER in swapped[k + 1]:
            swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
    assert len(releases_after_unfenced_loads(swapped)[1]) == found - UNSWAPPABLE[case], \
        "the check does not see a fence too late"
