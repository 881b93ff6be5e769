"""Whether the split decode's kernel boundaries cost time because its two kernels ask for different shared-memory
carveouts.

The decode kernels take most of the SM's shared memory, so Triton loads them with the "prefer shared" cache
config; the combine takes little and is loaded with the driver's default carveout. If the driver then runs the
combine with a smaller carveout, each SM must drain before the other kernel's programs can start on it, which
would defeat the programmatic dependent launch on both sides of the combine. This script sets
`CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` (percent of the maximum shared memory) on the compiled
kernels through the driver API and times CUDA graphs of back-to-back calls (decode_probe's cases, one token) in one
process, in rounds:
- `default`: as shipped;
- `combine100`: the combine's preferred carveout set to 100 (the decode kernels' own);
- `all100`: every pagedmla kernel loaded so far set to 100;
- `none`: no combine launched (split sequences' outputs are then wrong: a bound, not a kernel).
Each round ends by restoring the default (-1) on every kernel it changed.

Twenty-ninth session (63de464, benchmarks/results/session-29/carveout-63de464.txt, three rounds): no effect.
128 heads B1 N16384 22.5-23.0 us default, 23.1-23.4 `combine100`, 23.4-23.5 `all100`, 18.8-18.9 `none`; B1
N4096 14.8-14.9 for all three (11.6-11.7 `none`); B64 N4096 154.7-157.1 / 155.2-158.1 / 154.9-157.5; 16 heads
(bf16) B1 N16384 15.8-15.9 for all three, B64 N4096 83.7-84.1 for all three (79.7-79.9 `none`).

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/carveout.py --case 1,16384,128 --case 64,4096,128
"""

from __future__ import annotations

import argparse
import ctypes
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from triton.runtime.jit import JITFunction

import pagedmla.kernels as kernels_pkg
from pagedmla.ops import _triton_decode

CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
SHARED_STATIC = 1  # CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
MAX_DYNAMIC = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_cuda = ctypes.CDLL("libcuda.so.1")


def _compiled(fn: JITFunction) -> list:
    """Every compiled (and loaded) kernel of `fn`, on every device."""
    found = []
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            kernel._init_handles()
            found.append(kernel)
    return found


def _jit_functions() -> dict[str, JITFunction]:
    """The pagedmla kernels by name (module.function)."""
    found = {}
    for path in pathlib.Path(kernels_pkg.__file__).parent.glob("*.py"):
        module = sys.modules.get(f"pagedmla.kernels.{path.stem}")
        for name, value in vars(module).items() if module else ():
            if isinstance(value, JITFunction) and value.device_caches:
                found[f"{path.stem}.{name}"] = value
    return found


def _attr(kernel, attr: int) -> int:
    value = ctypes.c_int()
    rc = _cuda.cuFuncGetAttribute(ctypes.byref(value), attr, ctypes.c_void_p(kernel.function))
    if rc:
        raise RuntimeError(f"cuFuncGetAttribute({attr}) failed: {rc}")
    return value.value


def _set_carveout(fns, percent: int) -> None:
    for fn in fns:
        for kernel in _compiled(fn):
            rc = _cuda.cuFuncSetAttribute(ctypes.c_void_p(kernel.function), CARVEOUT, ctypes.c_int(percent))
            if rc:
                raise RuntimeError(f"cuFuncSetAttribute(carveout={percent}) failed: {rc}")


def _report() -> None:
    for name, fn in sorted(_jit_functions().items()):
        for kernel in _compiled(fn):
            print(f"  {name}: static smem {_attr(kernel, SHARED_STATIC)}, dynamic max {_attr(kernel, MAX_DYNAMIC)}, "
                  f"metadata shared {kernel.metadata.shared}, carveout {_attr(kernel, CARVEOUT)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H: one token, bf16 cache")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    launch_combine = _triton_decode._launch_combine
    for text in args.case or ["1,16384,128"]:
        b, n, h = (int(x) for x in text.split(","))
        case = Case(b, n, h, 1)
        plan = case.plan()
        fn = case.run(plan, None)
        fn()
        print(f"H{h} B{b} N{n} W{plan.num_partitions}: max error {case.check(plan, None):.2e}", flush=True)
        _report()
        combine = [_triton_decode._mla_decode_combine_kernel]
        for _ in range(args.repeat):
            for variant in ("default", "combine100", "all100", "none"):
                changed = []
                if variant == "combine100":
                    changed = combine
                elif variant == "all100":
                    changed = list(_jit_functions().values())
                elif variant == "none":
                    _triton_decode._launch_combine = lambda *a, **k: None
                try:
                    _set_carveout(changed, 100)
                    us = _time_graph(fn) * 1e3 / case.copies
                finally:
                    _triton_decode._launch_combine = launch_combine
                    _set_carveout(changed, -1)
                print(f"H{h} B{b} N{n} W{plan.num_partitions} {variant}: {us:.1f} us", flush=True)
        _set_carveout(combine, 100)
        print(f"H{h} B{b} N{n} combine100 max error {case.check(plan, None):.2e}", flush=True)
        _set_carveout(combine, -1)


if __name__ == "__main__":
    main()
