"""A piece's start in the 64-row warp-specialized decode (`kernels.mla_decode_ws`) and the combine's first loads,
timed in CUDA graphs of back-to-back calls (decode_probe's cases, one query token).

Variants:
- (twenty-sixth session, at 2204880 / cd4c904, a `START` hook since removed) the order of a piece's first
  copies: 0 the first pair's blocks, then q (as shipped before); 1 q, then the blocks (shipped since); 2 q, block
  a, and on a worker's first piece block b only once block a had landed. 128 heads B1 N16384 25.7-26.2 / 24.2-24.3
  / 24.2 us, B1 N4096 16.3-16.5 / 15.3-15.4 / 15.3 us; B64 N4096 within its noise (154.6-162.4 us for all three);
- kernel `trigger-end` (`--trigger`): the decode lets the combine launch once each program is at its last
  piece's epilogue: 0.7-1.7 us slower at batch 1 (cd4c904);
- kernel `no-stage` / `no-tma-store` (`--epilogue`): bounds without part of the partial tiles' epilogue, as it
  was at d67bca9 (one `[64, 256]` store a consumer): batch 1 N16384 23.7-24.2 us shipped, 22.5-23.0 without the
  staging, 22.3-22.4 without the store; N4096 15.3 / 14.2 / 13.0-13.1. (Since 9b4e664 the tile leaves in four
  64-column quarters, each stored once staged; in one run at 9b4e664 with a hook since removed: N16384 23.7-24.1
  us with one store against 22.9-23.4 with quarters, N4096 15.2 against 14.6, B64 N4096 within its noise;
  the bounds now patch the quarters);
- combine `shipped`, or `hoisted`: a patched copy of `_mla_decode_combine_kernel` that loads the schedule and the
  row offsets before its wait for the decode kernel (they are written before the decode kernel, which never
  lets its dependents launch early, so they are complete once the combine runs): no change (2204880).
16-head cases run the register FP8 kernel (combine variants only).

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws_start.py --case 1,16384,128 [--repeat 2]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode

WAIT = """    if PDL:
        gdc_wait()
        # the next kernel, if launched the same way, may be scheduled (it waits for this one's end)
        gdc_launch_dependents()
"""
LOADS_END = "    num_rows = (tl.load(offsets_ptr + b + 1) - row_start) * num_heads\n"


def _combine_hoisted():
    import pagedmla.kernels.mla_decode as md
    patch = SourcePatch(pathlib.Path(md.__file__).read_text())
    for rel in ("common", "fp8"):
        patch.sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    patch.sub(WAIT, "")
    patch.sub(LOADS_END, LOADS_END + WAIT)
    return load_patched("ws_start_combine_hoisted", patch.src)._mla_decode_combine_kernel


TRIGGER = ('gl.inline_asm_elementwise("griddepcontrol.launch_dependents; mov.b32 $0, $1;", "=r,r", [w], '
           'dtype=gl.int32, is_pure=False, pack=1)')
EPILOGUE = "            if TMA_OUT:\n                _stage_and_store("


def _ws_trigger_end():
    """`_mla_decode_ws_kernel` that lets the next kernel (the combine) launch once each program is at its last
    piece's epilogue (the shipped kernel never does: the combine launches at its end)."""
    import pagedmla.kernels.mla_decode_ws as ws
    patch = SourcePatch(pathlib.Path(ws.__file__).read_text())
    patch.sub("from .gluon_common ", "from pagedmla.kernels.gluon_common ")
    patch.sub(EPILOGUE, f"            if b == last_seq:\n                {TRIGGER}\n" + EPILOGUE)
    return load_patched("ws_start_trigger_end", patch.src)._mla_decode_ws_kernel


def _ws_epilogue_bound(name: str):
    """`_mla_decode_ws_kernel` with part of the partial tiles' epilogue taken out (a bound, not a kernel: the
    partials are then garbage): `no-stage` does not write the tile into shared memory before its TMA store,
    `no-tma-store` stages it but issues no store."""
    import pagedmla.kernels.mla_decode_ws as ws
    patch = SourcePatch(pathlib.Path(ws.__file__).read_text())
    patch.sub("from .gluon_common ", "from pagedmla.kernels.gluon_common ")
    if name == "no-stage":
        patch.sub("            tile.store(parts[i])\n", "")
    else:
        patch.sub("            tma.async_copy_shared_to_global(po_desc, [po_row, COLS * C + QUARTER * i], tile)\n", "")
    return load_patched(f"ws_start_{name.replace('-', '_')}", patch.src)._mla_decode_ws_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--combines", nargs="*", default=["shipped", "hoisted"])
    parser.add_argument("--trigger", action="store_true", help="also time the kernel with `_ws_trigger_end`")
    parser.add_argument("--epilogue", nargs="*", default=[], choices=["no-stage", "no-tma-store"],
                        help="also time these bounds (`_ws_epilogue_bound`)")
    args = parser.parse_args()
    combines = {"shipped": _triton_decode._mla_decode_combine_kernel, "hoisted": _combine_hoisted()}
    combines = {name: combines[name] for name in args.combines}
    kernels = {"shipped": _triton_decode._mla_decode_ws_kernel}
    if args.trigger:
        kernels["trigger-end"] = _ws_trigger_end()
    for name in args.epilogue:
        kernels[name] = _ws_epilogue_bound(name)
    saved = _triton_decode.WS16_KERNEL
    shipped_combine = _triton_decode._mla_decode_combine_kernel
    _triton_decode.WS16_KERNEL = "registers"
    try:
        for text in args.case:
            b, n, heads = (int(x) for x in text.split(","))
            fp8 = heads == 16
            case = Case(b, n, heads, 1, fp8=fp8)
            plan = case.plan()
            for _ in range(args.repeat):
                for kname, ws_kernel in (kernels.items() if not fp8 else [("rs", None)]):
                    if ws_kernel is not None:
                        _triton_decode._mla_decode_ws_kernel = ws_kernel
                    for name, kernel in combines.items():
                        _triton_decode._mla_decode_combine_kernel = kernel
                        us = _time_graph(case.run(plan, WS16 if fp8 else None)) * 1e3 / case.copies
                        print(f"H{heads} B{b} N{n} W{plan.num_partitions} kernel={kname} combine={name}: {us:.1f} us",
                              flush=True)
    finally:
        _triton_decode.WS16_KERNEL = saved
        _triton_decode._mla_decode_combine_kernel = shipped_combine
        _triton_decode._mla_decode_ws_kernel = kernels["shipped"]


if __name__ == "__main__":
    main()
