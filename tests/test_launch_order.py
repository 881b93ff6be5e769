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


# compiles each case for sm_90a and writes its PTX to <dir>/<case>.ptx (run in a process of its own: the CPU
# tier's interpreter flag replaces the kernels with interpreted functions, which do not compile)
_COMPILE = """
import sys
import cases_sm90
from compile_sm90 import compile_kernel
out = sys.argv[1]
for case in sys.argv[2:]:
    fn, types, constexprs, warps, stages = cases_sm90.CASES[case]()
    with open(f"{out}/{case}.ptx", "w") as f:
        f.write(compile_kernel(fn, types, constexprs, warps, stages).asm["ptx"])
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
    return lambda case: (out / f"{case}.ptx").read_text()


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

FENCE = "fence.proxy.async"
GENERIC_SMEM_LOAD = re.compile(r"\b(ld\.shared|ldmatrix)")
RELEASE = re.compile(r"\bmbarrier\.arrive\.shared")  # not arrive.expect_tx, not cp.async.mbarrier.arrive


def releases_after_unfenced_loads(ptx: str) -> tuple[int, list[int]]:
    """(single-thread mbarrier arrivals that follow shared loads in their basic block, the line numbers of those
    with no proxy fence between the last such load and the arrival)."""
    lines = [raw.split("//")[0].strip() for raw in ptx.splitlines()]
    after_loads, bad = 0, []
    for i, line in enumerate(lines):
        if not RELEASE.search(line):
            continue
        fenced = False
        for prev in reversed(lines[:i]):
            if LABEL.match(prev) or BRANCH.search(prev):
                break
            if FENCE in prev:
                fenced = True
            elif GENERIC_SMEM_LOAD.search(prev):
                after_loads += 1
                if not fenced:
                    bad.append(i + 1)
                break
    return after_loads, bad


def test_ws16_fences_before_it_releases_a_slot(compiled):
    """The 16-row FP8 kernel's widen warps read each ring slot with ordinary shared loads and release it to the
    loader, whose next TMA copy (the async proxy) writes it: a `fence.proxy.async` must come between. Without it
    the results came out wrong now and then on the H200 (BENCHMARKS.md, twentieth session). Every release that
    follows shared loads in its block must have the fence after them; with the fences taken out, the check
    flags the slot releases."""
    ptx = compiled("decode-ws16")
    found, bad = releases_after_unfenced_loads(ptx)
    assert found > 0, "no release after shared loads found (is the pattern still right?)"
    assert not bad, f"mbarrier arrivals after shared loads without a proxy fence at PTX lines {bad}"
    stripped = "\n".join(line for line in ptx.splitlines() if FENCE not in line)
    assert releases_after_unfenced_loads(stripped)[1], "the check does not see a missing fence"
