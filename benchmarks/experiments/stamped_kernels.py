"""What `ring_timeline.py` and `ws_timeline.py` share: loading a patched copy of a kernel module, a stand-in for
the launcher's kernel that hands each launch its call's stamp rows, and percentiles of stamps."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import tempfile

import torch


def load_patched(name: str, source: str):
    """The module `name` built from `source` (written to a temporary file, so Triton can read the kernels'
    source)."""
    path = pathlib.Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class StampSwap:
    """Stands in for the launcher's kernel: each launch gets the next call's stamp rows, inserted as the
    positional argument `at`."""

    def __init__(self, kernel, stamps: torch.Tensor, at: int):
        self.kernel, self.stamps, self.at, self.calls = kernel, stamps, at, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            buf = self.stamps[self.calls % self.stamps.shape[0]]
            self.calls += 1
            return self.kernel[grid](*args[:self.at], buf, *args[self.at:], **kwargs)
        return launch


def pct(values: torch.Tensor) -> dict[str, float]:
    """Percentiles 0, 10, 50, 90 and 100 of ns values, in us."""
    v = values.double().sort().values
    pick = [0.0, 0.1, 0.5, 0.9, 1.0]
    return {f"p{int(p * 100)}": round(float(v[min(len(v) - 1, int(p * (len(v) - 1)))]) / 1000, 2) for p in pick}


def replay_stamped(case, plan, attr: str, kernel, stamps: torch.Tensor, at: int, calls: int) -> int:
    """Swap the launcher's kernel `_triton_decode.<attr>` for the stamped `kernel` (stamp rows as argument
    `at`), capture about `calls` decode calls of `case` (a `decode_probe.Case`) in one CUDA graph, replay it
    three times and put the launcher back. Returns how many calls the graph holds (0: the case did not launch
    that kernel)."""
    from pagedmla.ops import _triton_decode
    original = getattr(_triton_decode, attr)
    swap = StampSwap(kernel, stamps, at)
    setattr(_triton_decode, attr, swap)
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
        setattr(_triton_decode, attr, original)
    return swap.calls


class SourcePatch:
    """A kernel module's source, edited at patch points that must each occur exactly `count` times (so a
    change to the kernel fails loudly here instead of stamping the wrong place)."""

    def __init__(self, src: str):
        self.src = src

    def sub(self, old: str, new: str, count: int = 1) -> None:
        if self.src.count(old) != count:
            raise RuntimeError(f"patch point {old!r} found {self.src.count(old)} times, expected {count}")
        self.src = self.src.replace(old, new)


def stamp_helper(width: int, sm_slot: int, row: str) -> str:
    """Gluon source of `_stamp(ptr, [w,] k)`, patched into a kernel module: `%globaltimer` (ns, common to all
    SMs) into slot k of the program's row of `width` int64 slots, and with k == 0 the SM id into `sm_slot`.
    `row`: "w" (the row is the argument w) or an expression such as "gl.program_id(0)"."""
    args = "ptr, w, k: gl.constexpr" if row == "w" else "ptr, k: gl.constexpr"
    return f'''

@gluon.jit
def _stamp({args}):
    r = {row}
    t = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [r], dtype=gl.int64, is_pure=False,
                                  pack=1)
    gl.store(ptr + r * {width} + k, t)
    if k == 0:
        sm = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [r], dtype=gl.int32, is_pure=False, pack=1)
        gl.store(ptr + r * {width} + {sm_slot}, sm.to(gl.int64))
'''
