"""A piece's start in the 64-row warp-specialized decode (`kernels.mla_decode_ws`) and the combine's first loads,
timed in CUDA graphs of back-to-back calls (decode_probe's cases, one query token).

Variants:
- (twenty-sixth session, at 2204880 / cd4c904, a `START` hook since removed) the order of a piece's first
  copies: 0 the first pair's blocks, then q (as shipped before); 1 q, then the blocks (shipped since); 2 q, block
  a, and on a worker's first piece block b only once block a had landed. 128 heads B1 N16384 25.7-26.2 / 24.2-24.3
  / 24.2 us, B1 N4096 16.3-16.5 / 15.3-15.4 / 15.3 us; B64 N4096 within its noise (154.6-162.4 us for all three);
- kernel `trigger-end` (`--trigger`): the decode lets the combine launch once each program is at its last
  piece's epilogue: 0.7-1.7 us slower at batch 1 (cd4c904);
- kernel `no-stage` / `no-tma-store` (`--bounds`): bounds without part of the partial tiles' epilogue, as it
  was at d67bca9 (one `[64, 256]` store a consumer): batch 1 N16384 23.7-24.2 us shipped, 22.5-23.0 without the
  staging, 22.3-22.4 without the store; N4096 15.3 / 14.2 / 13.0-13.1. (Since 9b4e664 the tile leaves in four
  64-column quarters, each stored once staged; in one run at 9b4e664 with a hook since removed: N16384 23.7-24.1
  us with one store against 22.9-23.4 with quarters, N4096 15.2 against 14.6, B64 N4096 within its noise;
  the bounds now patch the quarters);
- combine `shipped`, or `hoisted`: a patched copy of `_mla_decode_combine_kernel` that loads the schedule and the
  row offsets before its wait for the decode kernel (they are written before the decode kernel, which never
  lets its dependents launch early, so they are complete once the combine runs): no change (2204880).
Twenty-seventh session (benchmarks/results/session-27/, 128 heads B1, us a call, N16384 / N4096; shipped
22.9-23.5 / 14.6):
- bounds (`--bounds`, fb75707): `late-wait` 23.1-23.2 / 14.6 (the schedule, offsets and lengths read before the
  wait gain nothing); `half-partials` with combine `half` (half the partials' bytes stored and merged)
  20.0-20.1 / 13.4-13.5; `half-partials` alone 22.1-22.3 (its combine then reads stale rows); combine `half`
  alone 21.6-22.1; combine `empty` 22.3-22.4 (with `half-partials` 20.5);
- `early-pages` (9c11bb4): a worker's first two table entries from its schedule row, one dependent load fewer
  before its first blocks: 23.4-23.5 / 14.6, no gain;
- combine `discard` (d0336c4): `discard.global.L2` on the partial lines once merged (no write-back of dead
  scratch): slower, 23.3-23.8 / 16.2;
- `--combine-tiles` (9f1e766): 128,1,64,2 23.9 / 15.7-15.8, 128,1,128,4 25.2-25.3 / 17.4, 128,2,64,4 25.1-25.2 /
  17.0, against the heuristic's 128,1,32,1 23.4 / 14.6; 64,1,32,1 (two steps) 23.7-24.1 (65451be); with a
  second tile of pieces (the sixth field, `CombineConfig.block_t`; c42de38) 64,1,32,1,1,4 22.4-23.0 against
  23.0-23.5, 32,1,32,1,1,2 at N4096 14.9 against 15.3-15.4 (the heuristic takes these since e7275a6);
- combine `no-trigger` (2d38a47): the next kernel launched at the combine's end: 23.4-24.2 / 15.5-15.6, slower
  (B64 at 128 heads 154.5-155.1 against 155.8-156.0, 16 heads FP8 57.2-57.4 against 57.0-57.2).
fp16 split partials (a3b4830-3876d75, since reverted; `--partials` then chose them) stored half the bytes, but
the combine lost what the kernel gained: 22.7-23.2 / 14.9 against 22.9-23.4 / 14.6 (BENCHMARKS.md,
twenty-seventh session).
Twenty-ninth session (a8c6da8, benchmarks/results/session-29/ws-floor-a8c6da8.txt and ws-bounds-a8c6da8.txt,
128 heads B1, us a call at N16384 / N4096, two rounds each; shipped 22.4-23.0 / 14.9, combine `none` 18.6-18.9 /
11.7): with combine `none`, `blocks0+no-tma-store` 3.4 / 3.1-3.2 (the one-wave kernel's launch and prologue),
`blocks0` 6.0-6.1 / 4.6 (the partial tiles' stores), `blocks1` 11.2 / 9.2, `blocks3` 16.8-16.9 / 11.6
(`blocks2` 20.4 / 15.9-16.0, slower than three blocks and than the shipped kernel on pieces of two blocks: not
explained); combine `empty` after `blocks0+no-tma-store` 6.4-6.5 (a second kernel costs 3 us even when the first
does nothing); `half-partials` with combine `half` 19.9-20.0 / -, with `none` 17.0-17.1.
16-head cases run the register FP8 kernel (combine variants only).

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/ws_start.py --case 1,16384,128 [--repeat 2]
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched

from pagedmla.configs.decode import WS16, CombineConfig
from pagedmla.ops import _triton_decode

WAIT = """    if PDL:
        gdc_wait()
        # the next kernel, if launched the same way, may be scheduled (it waits for this one's end)
        gdc_launch_dependents()
"""
LOADS_END = "    num_rows = (tl.load(offsets_ptr + b + 1) - row_start) * num_heads\n"


COMBINE_GUARD = "    if (num_pieces > 1) & (tl.program_id(1) * BLOCK_R < num_rows):\n"
# the combine's program columns kept by `half`: those of the quarters `half-partials` stores (columns 0-127 and
# 256-383), so that it reads what the decode just wrote
HALF_COLUMNS = "    if (num_pieces > 1) & (tl.program_id(1) * BLOCK_R < num_rows) & ((tl.program_id(2) * BLOCK_DV) % 256 < 128):\n"
EMPTY = "    if (num_pieces > 1) & (tl.program_id(1) * BLOCK_R < num_rows) & (num_rows < 0):\n"


ACC_END = "            m_i = m_new\n"
# once a step's loads are done (the barrier orders them before what follows, for all the program's threads),
# each 128-byte line of partial rows it read is discarded from L2 without being written back: the partials are
# dead once merged, and a dirty line left in L2 is written to memory when it is evicted
DISCARD = ACC_END + """            tl.debug_barrier()
            lines = tl.program_id(2) * BLOCK_DV + tl.arange(0, BLOCK_DV // 32) * 32
            addr = (part_out_ptr + slot[:, None, None] * stride_po_s
                    + offs_m[None, :, None].to(tl.int64) * stride_po_r + lines[None, None, :])
            flag = (ok[:, :, None] & (lines[None, None, :] >= 0)).to(tl.int32)
            tl.inline_asm_elementwise(
                "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p discard.global.L2 [$1], 128; mov.b32 $0, 0; }",
                "=r,l,r", [addr.to(tl.int64), flag], dtype=tl.int32, is_pure=False, pack=1)
"""


def _combine_patched(name: str):
    """`hoisted`: the schedule and row offsets loaded before the wait for the decode; `no-trigger`: no
    `griddepcontrol.launch_dependents` (the next kernel launches at the combine's end); `discard`: the partial
    rows read are discarded from L2 once merged (`DISCARD`); bounds (the outputs are
    then wrong): `half` merges only half of the columns (those `half-partials` writes), `empty` merges nothing
    (the launch, the wait and the schedule's loads are left)."""
    import pagedmla.kernels.mla_decode as md
    patch = SourcePatch(pathlib.Path(md.__file__).read_text())
    for rel in ("common", "fp8"):
        patch.sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    if name == "hoisted":
        patch.sub(WAIT, "")
        patch.sub(LOADS_END, LOADS_END + WAIT)
    elif name == "no-trigger":
        # the next kernel launches only as this one ends, not once its programs passed their wait
        patch.sub(WAIT, "    if PDL:\n        gdc_wait()\n")
    elif name == "discard":
        patch.sub(ACC_END, DISCARD)
    else:
        patch.sub(COMBINE_GUARD, HALF_COLUMNS if name == "half" else EMPTY)
    return load_patched(f"ws_start_combine_{name}", patch.src)._mla_decode_combine_kernel


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


TMA_STORE = "            tma.async_copy_shared_to_global(po_desc, [po_row, COLS * C + QUARTER * i], tile)\n"
N_BLOCKS = "    n_blocks = gl.where(active & (hi > lo), gl.cdiv(hi - k_lo, BLOCK_N), 0)\n"
FIRST_WAIT = "    wait_for_prior_grid(w)\n    first_seq = gl.load("
LOAD_Q = "                    _load_q(q_desc, qr_desc,"
QUARTERS = "        for i in gl.static_range(4):\n            tile = tiles.index(4 * C + i)\n"
LAST_SEQ = "    last_seq = gl.minimum(gl.load(schedule_ptr + (1 + w) * 4 + 2), batch - 1)\n"
# the table entries of a worker's first two blocks, from the schedule row alone (its first sequence and first
# key: the blocks' start under masks that do not cut the front of the keys, as at batch 1 with one token)
EARLY_PAGES = LAST_SEQ + """    key0 = gl.load(schedule_ptr + (1 + w) * 4 + 1)
    row0 = lookup_ptr + first_seq.to(gl.int64) * stride_lt_b
    page0 = gl.load(row0 + key0 // page_size)
    page1 = gl.load(row0 + (key0 + BLOCK_N) // page_size)
"""
FIRST_PAGE = """

@gluon.jit
def _first_page(early, pieces, lookup_row, k0, hi, page_size):
    p = early
    if pieces > 0:
        p = _page(lookup_row, k0, hi, page_size)
    return p


@gluon.jit
def _logits("""


def _ws_bound(name: str):
    """`_mla_decode_ws_kernel` with part of its work taken out or moved (a bound, not a kernel: the outputs are
    then wrong, or racy): `no-stage` does not write the partial tile into shared memory before its TMA store;
    `no-tma-store` stages it but issues no store; `half-partials` stages and stores only quarters 0 and 1 of each
    consumer's tile (the bytes of bf16 partials); `late-wait` waits for the previous kernel only before q's
    copies (consumer 0) and not at all in consumer 1, so the schedule, offsets and lengths are read before the
    wait (what a prologue without its dependent loads after the wait could gain); `late-wait+half` both;
    `early-pages`: a worker's first two table entries loaded from its schedule row (`EARLY_PAGES`), one
    dependent load fewer before its first blocks' copies (right only where the first block starts at the
    schedule's first key); `early-pages+half` with `half-partials`; `blocksK`: each piece stops after its first K
    key blocks (0: no q and no key block is loaded, the epilogue stores a tile of zeros); `blocks0+no-tma-store`
    without the partial tiles' stores too (what the one-wave kernel costs with no key blocks)."""
    import pagedmla.kernels.mla_decode_ws as ws
    patch = SourcePatch(pathlib.Path(ws.__file__).read_text())
    patch.sub("from .gluon_common ", "from pagedmla.kernels.gluon_common ")
    if name == "no-stage":
        patch.sub("            tile.store(parts[i])\n", "")
    elif name == "no-tma-store":
        patch.sub(TMA_STORE, "")
    if "half" in name:
        patch.sub(QUARTERS, QUARTERS.replace("range(4)", "range(2)"))
    if "early-pages" in name:
        patch.sub("\n\n@gluon.jit\ndef _logits(", FIRST_PAGE)
        patch.sub(LAST_SEQ, EARLY_PAGES)
        patch.sub("_page(lookup_row, k_lo, hi, page_size), page_size",
                  "_first_page(page0, pieces, lookup_row, k_lo, hi, page_size), page_size")
        patch.sub("_page(lookup_row, k_lo + BLOCK_N, hi, page_size), page_size",
                  "_first_page(page1, pieces, lookup_row, k_lo + BLOCK_N, hi, page_size), page_size")
    if name.startswith("blocks"):
        patch.sub(N_BLOCKS, N_BLOCKS.replace("gl.cdiv(hi - k_lo, BLOCK_N), 0)",
                                             f"gl.minimum(gl.cdiv(hi - k_lo, BLOCK_N), {int(name[6])}), 0)"))
    if name.endswith("+no-tma-store"):
        patch.sub(TMA_STORE, "")
    if "late-wait" in name:
        patch.sub(FIRST_WAIT, "    first_seq = gl.load(")
        patch.sub(LOAD_Q, "                    wait_for_prior_grid(w)\n" + LOAD_Q)
    return load_patched(f"ws_start_{name.replace('-', '_').replace('+', '_')}", patch.src)._mla_decode_ws_kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--trigger", action="store_true", help="also time the kernel with `_ws_trigger_end`")
    parser.add_argument("--combines", nargs="*", default=["shipped", "hoisted"],
                        choices=["shipped", "hoisted", "half", "empty", "discard", "no-trigger", "none"],
                        help="none: no combine launched (a bound)")
    parser.add_argument("--bounds", nargs="*", default=[],
                        choices=["no-stage", "no-tma-store", "half-partials", "late-wait", "late-wait+half", "early-pages",
                                 "early-pages+half", "blocks0", "blocks1", "blocks2", "blocks3",
                                 "blocks0+no-tma-store"],
                        help="also time these kernels (`_ws_bound`)")
    parser.add_argument("--combine-tiles", nargs="*", default=["default"],
                        help="combine tiles P,R,DV,W (CombineConfig block_p, block_r, block_dv, num_warps) instead "
                             "of the heuristic's ('default')")
    args = parser.parse_args()
    combines = {name: (_triton_decode._mla_decode_combine_kernel if name in ("shipped", "none")
                       else _combine_patched(name)) for name in args.combines}
    launch_combine = _triton_decode._launch_combine
    kernels = {"shipped": _triton_decode._mla_decode_ws_kernel}
    if args.trigger:
        kernels["trigger-end"] = _ws_trigger_end()
    for name in args.bounds:
        kernels[name] = _ws_bound(name)
    saved = _triton_decode.WS16_KERNEL
    heuristic = _triton_decode.combine_heuristic
    shipped_combine = _triton_decode._mla_decode_combine_kernel
    _triton_decode.WS16_KERNEL = "registers"
    try:
        for text in args.case:
            b, n, heads = (int(x) for x in text.split(","))
            fp8 = heads == 16
            case = Case(b, n, heads, 1, fp8=fp8)
            plan = case.plan()
            for _, tile in itertools.product(range(args.repeat), args.combine_tiles):
                _triton_decode.combine_heuristic = heuristic if tile == "default" else (
                    lambda *a, t=tile, **k: CombineConfig(*(int(x) for x in t.split(","))))
                for kname, ws_kernel in (kernels.items() if not fp8 else [("rs", None)]):
                    if ws_kernel is not None:
                        _triton_decode._mla_decode_ws_kernel = ws_kernel
                    for name, kernel in combines.items():
                        _triton_decode._mla_decode_combine_kernel = kernel
                        if name == "none":
                            _triton_decode._launch_combine = lambda *a, **k: None
                        try:
                            us = _time_graph(case.run(plan, WS16 if fp8 else None)) * 1e3 / case.copies
                        finally:
                            _triton_decode._launch_combine = launch_combine
                        print(f"H{heads} B{b} N{n} W{plan.num_partitions} kernel={kname} "
                              f"combine={name} tile={tile}: {us:.1f} us", flush=True)
    finally:
        _triton_decode.combine_heuristic = heuristic
        _triton_decode.WS16_KERNEL = saved
        _triton_decode._mla_decode_combine_kernel = shipped_combine
        _triton_decode._mla_decode_ws_kernel = kernels["shipped"]


if __name__ == "__main__":
    main()
