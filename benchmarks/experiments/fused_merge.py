"""The 64-row Gluon decode with its merge inside the kernel (`kernels.mla_decode_ws`, FUSED: a grid-wide barrier,
then every program merges a share of the split sequences' rows; no combine kernel) against the kernel and its
combine, in one process: outputs and LSEs against each other and against the float32 reference, then CUDA-graph
replays of back-to-back calls (decode_probe's cases: bf16 cache, one token, causal), fused and not, alternating.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/fused_merge.py --case 1,16384,128 --repeat 3
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched, pct, replay_stamped, stamp_helper

from pagedmla.configs import decode as decode_configs
from pagedmla.ops import _triton_decode


def _run(case: Case, plan, fused: bool):
    """decode_probe's `Case.run` with the plan's barrier words when `fused` (FUSED_MERGE_MAX_BATCH set to cover the
    batch), without them otherwise."""
    sync = _triton_decode.grid_sync_words(plan.scalar_args) if fused else None

    def fn():
        for kv, q, out, lse in case.items:
            _triton_decode.launch_decode(q, case.offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, 0, 0.1352, 1,
                                         0, out, lse, plan.schedule, max_seq_length=case.q_len, qk_rope_head_dim=64,
                                         grid_sync=sync)
    return fn


MERGE_CALL = "        _merge_split_sequences(C, gl.program_id(0), num_programs,"
BARRIER_CALL = "        grid_barrier(sync_ptr, 2 * num_programs)\n"
COMPLETE_CALL = "        bulk_stores_complete(w)\n"


def _patched(name: str):
    """`_mla_decode_ws_kernel` with part of the fused path taken out (bounds: the outputs are then wrong):
    `no-merge` passes the barrier and merges nothing; `dead-merge` the same with the merge still compiled (behind
    a test that fails at run time: what its code costs the rest of the kernel); `no-barrier` merges without waiting for the other programs'
    partials."""
    import pagedmla.kernels.mla_decode_ws as ws
    patch = SourcePatch(pathlib.Path(ws.__file__).read_text())
    patch.sub("from .gluon_common ", "from pagedmla.kernels.gluon_common ")
    if name == "no-merge":
        patch.sub(MERGE_CALL, "        if False:\n    " + MERGE_CALL)
    elif name == "dead-merge":
        patch.sub(MERGE_CALL, "        if batch < 0:\n    " + MERGE_CALL)
    elif name == "no-barrier":
        patch.sub(BARRIER_CALL, "")
    elif name == "no-complete":
        patch.sub(COMPLETE_CALL, "")
        patch.sub(MERGE_CALL, "        if False:\n    " + MERGE_CALL)
    elif name == "complete-only":
        patch.sub(BARRIER_CALL, "")
        patch.sub(MERGE_CALL, "        if False:\n    " + MERGE_CALL)
    elif name.startswith(("sleep", "relaxed")):
        _patch_spin(patch, name)
    elif name.startswith("p"):
        patch.sub("MERGE_P = gl.constexpr(32)", f"MERGE_P = gl.constexpr({int(name[1:])})")
    elif name == "stamps":
        _add_stamps(patch)
    return load_patched(f"fused_merge_{name.replace('-', '_')}", patch.src)._mla_decode_ws_kernel


# stamps (int64 slots of a program's row): consumer C's key loop done (C), its TMA stores complete (2 + C), the
# barrier passed (4 + C), its merge done (6 + C); consumer 0 past its wait for the previous kernel (8); the SM (9)
STAMPS = ["loop_end", "stores_done", "barrier_passed", "merge_done"]
WIDTH = 10


def _add_stamps(patch: SourcePatch) -> None:
    sub = patch.sub
    sub("\n\n@gluon.jit\ndef _visible(", stamp_helper(WIDTH, 9, "gl.program_id(0)") + "\n\n@gluon.jit\ndef _visible(")
    sub("out_desc, po_desc, sync_ptr,\n", "out_desc, po_desc, sync_ptr, stamps_ptr,\n")
    sub("TMA_OUT: gl.constexpr, FUSED: gl.constexpr):", "TMA_OUT: gl.constexpr, FUSED: gl.constexpr, stamps_ptr):")
    sub("HAS_SINK, TMA_OUT, FUSED)),", "HAS_SINK, TMA_OUT, FUSED, stamps_ptr)),", count=2)
    sub("    wait_for_prior_grid(w)\n", "    wait_for_prior_grid(w)\n    if C == 0:\n        _stamp(stamps_ptr, 8)\n")
    sub("        bulk_stores_complete(w)\n",
        "        _stamp(stamps_ptr, C)\n        bulk_stores_complete(w)\n        _stamp(stamps_ptr, 2 + C)\n")
    sub(BARRIER_CALL, BARRIER_CALL + "        _stamp(stamps_ptr, 4 + C)\n")
    sub("                               HAS_SINK)\n", "                               HAS_SINK)\n        _stamp(stamps_ptr, 6 + C)\n")


def timeline(case: Case, plan, calls: int) -> None:
    """Print the stamps of two middle calls of a graph of back-to-back fused calls: percentiles over the programs,
    in us after the call's first program passed its wait for the previous kernel."""
    programs = plan.num_partitions * ((case.heads * case.q_len + 63) // 64)
    stamps = torch.zeros(calls, programs, WIDTH, dtype=torch.int64, device="cuda")
    case.run = lambda plan_, config: _run(case, plan_, True)
    used = replay_stamped(case, plan, "_mla_decode_ws_kernel", _patched("stamps"), stamps, 16, calls)
    for k in (used // 2, used // 2 + 1):
        s = stamps[k].cpu()
        t0 = int(s[:, 8].min())
        print(f"  call {k}: {programs} programs", flush=True)
        for i, name in enumerate(STAMPS):
            for c in (0, 1):
                print(f"    {name} c{c}: {pct(s[:, 2 * i + c] - t0)}", flush=True)
        last = int(s[:, 6:8].max())
        print(f"    call {round((last - t0) / 1000, 2)} us; to the next call's first wait "
              f"{round((int(stamps[k + 1, :, 8].min()) - last) / 1000, 2)} us", flush=True)


SPIN = """        SPIN:
        ld.acquire.gpu.global.u32 old, [$1];
        setp.ne.u32 p, old, 0;
        @p bra SPIN;
        DONE:"""


def _patch_spin(patch: SourcePatch, name: str) -> None:
    """`grid_barrier` (in a patched copy of gluon_common, imported by the patched kernel) polling with a pause
    (`sleep<ns>`) or with relaxed loads and one acquire fence at the end (`relaxed`, `relaxed-sleep<ns>`)."""
    import pagedmla.kernels.gluon_common as common
    cpatch = SourcePatch(pathlib.Path(common.__file__).read_text())
    ns = name.rsplit("sleep", 1)[1] if "sleep" in name else ""
    load = "ld.relaxed.gpu.global.u32" if name.startswith("relaxed") else "ld.acquire.gpu.global.u32"
    pause = f"        nanosleep.u32 {ns};\n" if ns else ""
    tail = "        fence.acq_rel.gpu;\n" if name.startswith("relaxed") else ""
    cpatch.sub(SPIN, f"        SPIN:\n{pause}        {load} old, [$1];\n        setp.ne.u32 p, old, 0;\n"
                     f"        @p bra SPIN;\n{tail}        DONE:")
    module = load_patched(f"gluon_common_{name.replace('-', '_')}", cpatch.src)
    patch.sub("from pagedmla.kernels.gluon_common ", f"from {module.__name__} ")
    patch.sub(MERGE_CALL, "        if False:\n    " + MERGE_CALL)


class _Launch:
    """A kernel whose launches drop some keyword arguments (`launch_cooperative_grid`, `launch_pdl`)."""

    def __init__(self, kernel, drop: tuple[str, ...]):
        self.kernel, self.drop = kernel, drop

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            return self.kernel[grid](*args, **{k: v for k, v in kwargs.items() if k not in self.drop})
        return launch


# variant: (kernel patch or None, launch keywords dropped)
VARIANTS = {
    "coop": (None, ()),
    "no-coop": (None, ("launch_cooperative_grid",)),
    "coop-no-pdl": (None, ("launch_pdl",)),
    "no-merge": ("no-merge", ()),
    "no-merge-no-coop": ("no-merge", ("launch_cooperative_grid",)),
    "no-merge-no-pdl": ("no-merge", ("launch_pdl",)),
    "no-barrier": ("no-barrier", ()),
    "dead-merge": ("dead-merge", ()),
    "no-complete": ("no-complete", ()),
    "complete-only": ("complete-only", ()),
    "sleep100": ("sleep100", ()),
    "sleep500": ("sleep500", ()),
    "relaxed": ("relaxed", ()),
    "relaxed-sleep100": ("relaxed-sleep100", ()),
    "p8": ("p8", ()),
    "p16": ("p16", ()),
    "p64": ("p64", ()),
}


def _reference(case: Case, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 output and LSE of copy i, every sequence (causal, one token each)."""
    kv, q, _, _ = case.items[i]
    outs, lses = [], []
    for b in range(case.batch):
        rows = kv.blocks[kv.lookup_table[b].long()].float()[:, 0, 0].reshape(-1, 576)[: case.keys]
        logits = 0.1352 * torch.einsum("hd,nd->hn", q[b].float(), rows)
        outs.append(torch.softmax(logits, -1) @ rows[:, :512])
        lses.append(torch.logsumexp(logits, -1))
    return torch.stack(outs), torch.stack(lses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N,H")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", nargs="*", default=["coop"], choices=sorted(VARIANTS),
                        help="fused kernels timed besides the kernel + combine (`coop`: as shipped)")
    parser.add_argument("--timeline", action="store_true", help="also print the fused kernel's stamps")
    parser.add_argument("--kernel-only", action="store_true",
                        help="also time the kernel without the combine and without the fused path (a bound)")
    args = parser.parse_args()
    shipped = _triton_decode._mla_decode_ws_kernel
    kernels = {}
    for name in args.variants:
        patch, drop = VARIANTS[name]
        kernel = _patched(patch) if patch else shipped
        kernels[name] = _Launch(kernel, drop) if drop else kernel
    saved = decode_configs.FUSED_MERGE_MAX_BATCH
    try:
        for text in args.case or ["1,16384,128"]:
            b, n, heads = (int(x) for x in text.split(","))
            decode_configs.FUSED_MERGE_MAX_BATCH = b
            case = Case(b, n, heads, 1)
            plan = case.plan()
            results = {}
            for fused in (False, True):
                for _, _, out, lse in case.items:
                    out.fill_(float("nan"))
                    lse.fill_(float("nan"))
                _run(case, plan, fused)()
                torch.cuda.synchronize()
                results[fused] = [(out.float().clone(), lse.clone()) for _, _, out, lse in case.items]
            worst = 0.0
            for i in range(case.copies):
                want_out, want_lse = _reference(case, i)
                for fused in (False, True):
                    got_out, got_lse = results[fused][i]
                    err = float((got_out.view_as(want_out) - want_out).abs().max())
                    lse_err = float((got_lse.view_as(want_lse) - want_lse).abs().max())
                    worst = max(worst, err)
                    if i == 0:
                        print(f"H{heads} B{b} N{n} fused={fused}: max |out - ref| {err:.2e}, max |lse - ref| "
                              f"{lse_err:.2e}", flush=True)
                d_out = float((results[True][i][0] - results[False][i][0]).abs().max())
                d_lse = float((results[True][i][1] - results[False][i][1]).abs().max())
                if i == 0:
                    print(f"  fused vs combine: max |out diff| {d_out:.2e}, max |lse diff| {d_lse:.2e}", flush=True)
            print(f"  worst over {case.copies} copies: {worst:.2e}", flush=True)
            for _ in range(args.repeat):
                us = _time_graph(_run(case, plan, False)) * 1e3 / case.copies
                print(f"H{heads} B{b} N{n} W{plan.num_partitions} kernel + combine: {us:.1f} us", flush=True)
                if args.kernel_only:
                    launch_combine = _triton_decode._launch_combine
                    _triton_decode._launch_combine = lambda *a, **k: None
                    try:
                        us = _time_graph(_run(case, plan, False)) * 1e3 / case.copies
                        _triton_decode._mla_decode_ws_kernel = _Launch(shipped, ("launch_pdl",))
                        us_plain = _time_graph(_run(case, plan, False)) * 1e3 / case.copies
                    finally:
                        _triton_decode._launch_combine = launch_combine
                        _triton_decode._mla_decode_ws_kernel = shipped
                    print(f"H{heads} B{b} N{n} W{plan.num_partitions} kernel alone (no combine, no barrier): "
                          f"{us:.1f} us, without PDL {us_plain:.1f} us", flush=True)
                for name, kernel in kernels.items():
                    _triton_decode._mla_decode_ws_kernel = kernel
                    try:
                        us = _time_graph(_run(case, plan, True)) * 1e3 / case.copies
                    finally:
                        _triton_decode._mla_decode_ws_kernel = shipped
                    print(f"H{heads} B{b} N{n} W{plan.num_partitions} fused {name}: {us:.1f} us", flush=True)
            if args.timeline:
                timeline(case, plan, 4 * len(case.items))
            # after hundreds of graph replays the barrier word must be back at 0 and the outputs unchanged
            torch.cuda.synchronize()
            print(f"  barrier word after replays: {plan.scalar_args[4].item()}", flush=True)
            _run(case, plan, True)()
            again = float((case.items[0][2].float() - results[True][0][0]).abs().max())
            print(f"  fused output after replays vs first call: {again:.2e}", flush=True)
    finally:
        decode_configs.FUSED_MERGE_MAX_BATCH = saved


if __name__ == "__main__":
    main()
