"""Compile a pagedmla Triton kernel for sm_90a on a machine without a GPU and print what ptxas reports.

Used while tuning: registers, spills, shared memory, and whether the main loop's loads became cp.async /
TMA copies and its dots warpgroup MMAs. Nothing runs; the numbers are the compiler's, not measurements.

    PYTHONPATH=src python scripts/compile_sm90.py decode-fp8-h16     # a case of scripts/cases_sm90.py
    PYTHONPATH=src python scripts/compile_sm90.py decode-fp8-h16 --show 'async_copy|local_alloc'

It needs only the triton wheel (whose bundled ptxas it runs), no GPU and no CUDA driver.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def _sig(fn, types: dict[str, str], constexprs: dict[str, object]) -> dict[str, str]:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in types:
            sig[name] = types[name]
        elif name.endswith("_ptr"):
            raise KeyError(f"pointer {name} needs a type")
        elif name in ("qk_scale", "scale", "eps"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_kernel(fn, types, constexprs, num_warps, num_stages, unaligned=(), maxnreg=None):
    """`unaligned`: argument names not to mark 16-divisible (a launch marks every pointer and int argument that
    is a multiple of 16, and the loads vectorize and pipeline only with that knowledge)."""
    jit = fn
    sig = _sig(jit, types, constexprs)
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(jit.arg_names)
             if sig[name] in ("i32",) or sig[name].startswith("*")
             if name not in unaligned and i not in jit.do_not_specialize}
    src = ASTSource(jit, sig, constexprs={(jit.arg_names.index(k),): v for k, v in constexprs.items()},
                    attrs=attrs)
    if type(jit).__name__ == "GluonJITFunction":  # a Gluon kernel (explicit layouts) has a source type of its own
        from triton.experimental.gluon._runtime import GluonASTSource
        src = GluonASTSource(jit, sig, constexprs={(jit.arg_names.index(k),): v for k, v in constexprs.items()},
                             attrs=attrs)
    target = GPUTarget("cuda", 90, 128)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    if maxnreg:
        options["maxnreg"] = maxnreg
    return triton.compile(src, target=target, options=options)


def _ptxas_usage(ptx: str) -> str:
    """ptxas's own register / spill line for the kernel (the bundled ptxas, sm_90a)."""
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        res = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", src, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, check=False)
    lines = [ln.split("info    : ")[-1] for ln in res.stderr.splitlines() if "Used" in ln or "spill" in ln]
    # ptxas's "Potential Performance Loss" notes: e.g. warpgroup MMAs serialized (each waits for the last)
    lines += [ln.split("info    : ")[-1] for ln in res.stderr.splitlines() if "Performance Loss" in ln]
    return " | ".join(lines) or res.stderr[-400:]


def report(kernel, show: str = "") -> None:
    asm = kernel.asm
    ptx = asm["ptx"]
    ttgir = asm["ttgir"]
    print("shared bytes:", kernel.metadata.shared, "|", _ptxas_usage(ptx))
    counts = {k: len(re.findall(p, ptx)) for k, p in (
        ("cp.async", r"cp\.async\.cg|cp\.async\.ca"), ("tma", r"cp\.async\.bulk"), ("wgmma", r"wgmma\.mma_async"),
        ("mma.sync", r"mma\.sync"), ("ld.global", r"ld\.global"), ("ldmatrix", r"ldmatrix"),
        ("st.local", r"st\.local"), ("ld.local", r"ld\.local"))}
    print(counts)
    if show:
        for line in ttgir.splitlines():
            if re.search(show, line):
                print(line.strip()[:200])


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("case", help="case names, comma-separated (`decode-<bf16|fp8>-m<M>-n<N>-w<W>-s<S>"
                        "[-prefetch]`: any dense decode config), or a prefix ending in '*' (every case it starts)")
    parser.add_argument("--show", default="", help="regex of TTGIR lines to print")
    parser.add_argument("--dump", default="", help="write ttgir/ptx to this prefix")
    parser.add_argument("--max-shared", type=int, default=0,
                        help="exit 1 when a case needs more shared memory than this (bytes; the H200: 232448)")
    parser.add_argument("--maxnreg", type=int, default=0, help="cap registers per thread (ptx .maxnreg)")
    args = parser.parse_args(argv)
    from cases_sm90 import CASES, decode_spec  # beside this script (on sys.path when run)
    names = [n for n in CASES if n.startswith(args.case[:-1])] if args.case.endswith("*") else args.case.split(",")
    CASES.update({n: decode_spec(n) for n in names if n not in CASES and decode_spec(n)})
    over = []
    for name in names:
        fn, types, constexprs, warps, stages = CASES[name]()
        k = compile_kernel(fn, types, constexprs, warps, stages, maxnreg=args.maxnreg or None)
        if len(names) > 1:
            print(f"{name}: ", end="")
        report(k, args.show)
        if args.max_shared and k.metadata.shared > args.max_shared:
            over.append(f"{name} ({k.metadata.shared} bytes)")
        if args.dump:
            for key in ("ttgir", "ptx"):
                with open(f"{args.dump}.{key}", "w") as f:
                    f.write(k.asm[key])
    if over:
        print("over the shared-memory limit:", ", ".join(over))
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    sys.exit(main())
