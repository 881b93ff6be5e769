"""Where the register-operand 16-row FP8 decode's time goes (`pagedmla.kernels.mla_decode_ws16_rs`), by taking
work out of patched copies of the kernel:
- `fake-cvt-logits`: the logits' e4m3 -> fp16 conversions replaced by byte permutes (as many instructions, on
  the integer pipe instead of the conversion one);
- `fake-cvt-pv`: P @ V's conversions dropped (its byte permutes stay);
- `fake-cvt`: both;
- `no-logits`: zero logits (no operand loads, conversions or MMAs; the softmax and P @ V stay);
- `no-pv`: no P @ V (its operand loads, conversions and MMAs);
- `loader-only`: the consumers only pass the ring's barriers on;
- `logits-4acc` (not an ablation, a candidate): each latent chunk's logits MMAs into an accumulator of its own,
  summed after the last wait, instead of one chain of 32 dependent MMAs;
- `rope-ss` (a candidate): the rope's logits MMA reads its operand from shared memory (no register copy);
  `4acc-rope-ss`: both;
- `dup-logits` / `dup-pv`: each of the latent logits' (P @ V's) warpgroup MMAs issued twice on the same operands
  (no more loads or conversions): what the MMAs themselves cost;
- `k-early` (a candidate): the logits' four chunks' words loaded before any is converted (`v-early` and
  `kv-early`, P @ V's words loaded before the softmax, were measured at 0d38640, before P @ V moved into
  `_p_at_v`: benchmarks/results/session-23/rs-ablate-0d38640.txt);
- `no-scm`: no per-block maximum of the keys' scales (the P range check's `f` stays at g: never a redo for
  scales); `static-q`: the logits' q chunks indexed statically (no `opaque_zero`);
- `no-qscale`: consumer 1 (which widens q for both since the twenty-fifth session) takes q's per-row power of
  two as 1 instead of computing it (`_q_scale`). (Before that session each consumer widened its own copy and
  `c0-no-qscale`, `c1-no-qscale`, `c0-no-widen` took the work out of one of them: consumer 0's widening cost
  about 3 us a call, benchmarks/results/session-25/rs-ablate-4b4d32f.txt);
- `hack-6` / `hack-8`: consumer 1 shares consumer 0's fp16 q (both write it at a piece's start: a race) and the
  merge buffer holds one chunk (the others overwrite it), with 6 / 8 ring slots: whether more slots (bytes in
  flight) would pay for a kernel that frees the shared memory for them honestly.
- `trigger-end` / `trigger-merge` / `trigger-last` (candidates, not in the default list): the kernel lets the next
  kernel (the combine) launch (`griddepcontrol.launch_dependents`) when consumer 0 reaches its last piece's
  store / its last piece's merge, or when both consumers start their last piece. Twenty-sixth session: no gain
  at B64 N4096, 0.4 us at B128 for `trigger-merge`, `trigger-last` slower (BENCHMARKS.md;
  benchmarks/results/session-26/rs-ablate-trigger-*.txt).
Timed in one process against the unpatched copy (`base`), CUDA-graph replays of decode_probe's cases (16 heads,
one token, FP8, one worker per SM unless `--workers` says otherwise; 0: the plan heuristic's count). The
patched copies' outputs are garbage and not checked: these are bounds, not kernels.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/rs_ablate.py --case 64,4096 [--repeat 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import Case, _time_graph
from stamped_kernels import SourcePatch, load_patched

from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode

CVT_LOGITS = """        cvt.rn.f16x2.e4m3x2 a, lo;
        cvt.rn.f16x2.e4m3x2 b, hi;
"""
FAKE_LOGITS = """        prmt.b32 a, $4, 0, 0x1404;
        prmt.b32 b, $4, 0, 0x3424;
"""
CVT_PV = """        cvt.rn.f16x2.e4m3x2 a, l0;
        cvt.rn.f16x2.e4m3x2 b, l1;
        cvt.rn.f16x2.e4m3x2 c, h0;
        cvt.rn.f16x2.e4m3x2 d, h1;
        mov.b32 {$0, $1}, a;
        mov.b32 {$2, $3}, b;
        mov.b32 {$4, $5}, c;
        mov.b32 {$6, $7}, d;
"""
FAKE_PV = """        mov.b32 {$0, $1}, lo;
        mov.b32 {$2, $3}, hi;
        mov.b32 {$4, $5}, lo;
        mov.b32 {$6, $7}, hi;
"""
LOGITS_FIRST = "                    a_rope = rope_pairs.index(pr).load(_dot_a())\n"
LOGITS_WAIT = "                    s_lat, a_2, a_3 = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, a_2, a_3))\n"
ZERO_LOGITS = """                    s_rope = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
                    s_lat = gl.zeros([BLOCK_N, ROWS], gl.float32, layout) + dyn
                    sc = sc_pairs.index(pr).load(key_l)
"""
PV_FIRST = "                    if (k0 < lo) | (k0 + BLOCK_N > hi):\n"
PV_WAIT = "o0, o1, o2, o3 = _p_at_v(raw_s, pr, pt, o0, o1, o2, o3, k0, lo, hi, False)\n"
BLOCK_LOOP = "                for i in range((c0 + WG) % 2, n_blocks, 2):\n"
LOGITS_CHAIN = """                    s_lat = warpgroup_mma(a_0, q16_s.index(dyn).permute((1, 0)),
                                          gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
                    a_1 = _k_operand(raw_s.index(4 * pr + 1).load(_k_words()))
                    s_lat = warpgroup_mma(a_1, q16_s.index(1 + dyn).permute((1, 0)), s_lat, is_async=True)
                    s_rope, a_rope, a_0 = warpgroup_mma_wait(num_outstanding=1, deps=(s_rope, a_rope, a_0))
                    a_2 = _k_operand(raw_s.index(4 * pr + 2).load(_k_words()))
                    s_lat = warpgroup_mma(a_2, q16_s.index(2 + dyn).permute((1, 0)), s_lat, is_async=True)
                    a_1 = warpgroup_mma_wait(num_outstanding=1, deps=(a_1,))
                    a_3 = _k_operand(raw_s.index(4 * pr + 3).load(_k_words()))
                    s_lat = warpgroup_mma(a_3, q16_s.index(3 + dyn).permute((1, 0)), s_lat, is_async=True)
                    sc = sc_pairs.index(pr).load(key_l)
                    s_lat, a_2, a_3 = warpgroup_mma_wait(num_outstanding=0, deps=(s_lat, a_2, a_3))
"""
LOGITS_4ACC = """                    zero = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
                    s_0 = warpgroup_mma(a_0, q16_s.index(dyn).permute((1, 0)), zero, use_acc=False, is_async=True)
                    a_1 = _k_operand(raw_s.index(4 * pr + 1).load(_k_words()))
                    s_1 = warpgroup_mma(a_1, q16_s.index(1 + dyn).permute((1, 0)), zero, use_acc=False, is_async=True)
                    s_rope, a_rope, a_0, s_0 = warpgroup_mma_wait(num_outstanding=1, deps=(s_rope, a_rope, a_0, s_0))
                    a_2 = _k_operand(raw_s.index(4 * pr + 2).load(_k_words()))
                    s_2 = warpgroup_mma(a_2, q16_s.index(2 + dyn).permute((1, 0)), zero, use_acc=False, is_async=True)
                    a_1, s_1 = warpgroup_mma_wait(num_outstanding=1, deps=(a_1, s_1))
                    a_3 = _k_operand(raw_s.index(4 * pr + 3).load(_k_words()))
                    s_3 = warpgroup_mma(a_3, q16_s.index(3 + dyn).permute((1, 0)), zero, use_acc=False, is_async=True)
                    sc = sc_pairs.index(pr).load(key_l)
                    s_2, s_3, a_2, a_3 = warpgroup_mma_wait(num_outstanding=0, deps=(s_2, s_3, a_2, a_3))
                    s_lat = (s_0 + s_1) + (s_2 + s_3)
"""
ROPE_RS = """                    a_rope = rope_pairs.index(pr).load(_dot_a())
                    s_rope = warpgroup_mma(a_rope, qrp_s.index(qb).permute((1, 0)),
                                           gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
"""
ROPE_SS = """                    a_rope = gl.zeros([BLOCK_N, ROWS], gl.float32, layout)
                    s_rope = warpgroup_mma(rope_pairs.index(pr), qrp_s.index(qb).permute((1, 0)),
                                           gl.zeros([BLOCK_N, ROWS], gl.float32, layout), use_acc=False, is_async=True)
"""
PASS_LOOP = """                for i in range((c0 + WG) % 2, n_blocks, 2):
                    c = c0 + i
                    mbarrier.wait(k_ready.index((2 * c) % SLOTS), ((2 * c) // SLOTS) & 1)
                    mbarrier.wait(k_ready.index((2 * c + 1) % SLOTS), ((2 * c + 1) // SLOTS) & 1)
                    mbarrier.arrive(k_empty.index((2 * c) % SLOTS))
                    mbarrier.arrive(k_empty.index((2 * c + 1) % SLOTS))
                for i in range(0):
"""


def _cut(patch: SourcePatch, first: str, last: str, new: str) -> None:
    i = patch.src.index(first)
    j = patch.src.index(last) + len(last)
    patch.src = patch.src[:i] + new + patch.src[j:]


def _source(name: str) -> str:
    import pagedmla.kernels.mla_decode_ws16_rs as rs
    patch = SourcePatch(pathlib.Path(rs.__file__).read_text())
    for rel in ("gluon_common", "mla_decode_ws16", "mla_decode_ws"):
        patch.sub(f"from .{rel} ", f"from pagedmla.kernels.{rel} ")
    if name in ("fake-cvt-logits", "fake-cvt"):
        patch.sub(CVT_LOGITS, FAKE_LOGITS)
    if name in ("fake-cvt-pv", "fake-cvt"):
        patch.sub(CVT_PV, FAKE_PV)
    if name == "no-logits":
        _cut(patch, LOGITS_FIRST, LOGITS_WAIT, ZERO_LOGITS)
    if name == "no-pv":
        _cut(patch, PV_FIRST, PV_WAIT, "")
    if name in ("rope-ss", "4acc-rope-ss"):
        patch.sub(ROPE_RS, ROPE_SS)
    if name in ("logits-4acc", "4acc-rope-ss"):
        patch.sub(LOGITS_CHAIN, LOGITS_4ACC)
    if name == "dup-logits":
        for k in (1, 2, 3):
            call = f"                    s_lat = warpgroup_mma(a_{k}, q16_s.index({k} + dyn).permute((1, 0)), s_lat, is_async=True)\n"
            patch.sub(call, call + call)
        first = "                    a_1 = _k_operand(raw_s.index(4 * pr + 1).load(_k_words()))\n"
        patch.sub(first, "                    s_lat = warpgroup_mma(a_0, q16_s.index(dyn).permute((1, 0)), s_lat, is_async=True)\n" + first)
    if name == "dup-pv":
        for k in range(4):
            call = f"                    o{k} = warpgroup_mma(v{k}, pt, o{k}, is_async=True)\n"
            patch.sub(call, call + call)
    if name == "k-early":
        first = "                    a_rope = rope_pairs.index(pr).load(_dot_a())\n"
        patch.sub(first, "".join(f"                    kw{k} = raw_s.index(4 * pr + {k}).load(_k_words())\n"
                                 for k in range(4)) + first)
        for k in range(4):
            patch.sub(f"_k_operand(raw_s.index(4 * pr + {k}).load(_k_words()))", f"_k_operand(kw{k})")
    if name == "no-scm":
        patch.sub("""                    sc_abs = gl.reshape(gl.abs(sc), [4, 16])
                    scm_s.index(rb).store(gl.zeros_like(sc_abs) + gl.max(sc_abs, axis=1)[:, None])
""", "")
        patch.sub("                    f = _pow2_below(gl.convert_layout(gl.max(scm_s.index(rb).load(_red_layout()), axis=0), col_l))\n",
                  "                    f = g_i\n")
    if name == "static-q":
        patch.sub("                    dyn = qb * N_CHUNKS + opaque_zero(c)\n", "                    dyn = qb * N_CHUNKS\n")
    if name.startswith("hack-"):
        patch.sub("    q16_b = gl.allocate_shared_memory(gl.float16, [N_CHUNKS, ROWS, CHUNK], _bf16_tile())\n",
                  "    q16_b = q16_a\n")
        patch.sub("    qrp_b = gl.allocate_shared_memory(gl.bfloat16, [ROWS, D_ROPE], qr_desc.layout)\n",
                  "    qrp_b = qrp_a\n")
        patch.sub("gl.allocate_shared_memory(gl.float32, [N_CHUNKS, CHUNK, ROWS]",
                  "gl.allocate_shared_memory(gl.float32, [1, CHUNK, ROWS]")
        for k in (1, 2, 3):
            patch.sub(f"ox_s.index({k})", "ox_s.index(0)", count=2)
    if name == "loader-only":
        patch.sub(BLOCK_LOOP, PASS_LOOP)
    if name in ("trigger-end", "trigger-last", "trigger-merge"):
        # the combine (the next kernel) may launch once every program is at its last piece's end / start
        # (`griddepcontrol.launch_dependents`; the shipped kernel never triggers, so the combine launches at its end)
        trigger = ("griddepcontrol.launch_dependents; mov.b32 $0, $1;", "=r,r", "[w], dtype=gl.int32, is_pure=False, pack=1")
        call = f'gl.inline_asm_elementwise("{trigger[0]}", "{trigger[1]}", {trigger[2]})'
        if name == "trigger-end":
            at = "                _finish_piece(o0, o1, o2, o3, m, l_i, whole, b, first_seq, w,"
            patch.sub(at, f"                if b == last_seq:\n                    {call}\n" + at)
        elif name == "trigger-merge":  # consumer 0 at its last piece's merge, before it waits for consumer 1
            at = "                # O merged with consumer 1's\n"
            patch.sub(at, at + f"                if b == last_seq:\n                    {call}\n")
        else:
            at = "            if n_blocks > 0:\n                # consumer 1 widens q"
            patch.sub(at, f"            if b == last_seq:\n                {call}\n" + at)
    if name == "no-qscale":
        ones = "gl.full([ROWS], 1.0, gl.float32, col_l)"
        patch.sub("                    up, down = _q_scale(q_s, col_l)\n",
                  f"                    up = {ones}\n                    down = {ones}\n")
    return patch.src





# `dup-pv` and `no-scm` patch the kernel as it was before 10264c8 (P @ V moved into `_p_at_v`) and be0ae8f (the
# scale check removed), `hack-6` and `hack-8` as it was before the consumers shared q's fp16 copy (twenty-fifth
# session): their patch points no longer exist, so they are left out of the default list
VARIANTS = ["base", "fake-cvt-logits", "fake-cvt-pv", "fake-cvt", "no-logits", "no-pv", "loader-only", "logits-4acc",
            "rope-ss", "4acc-rope-ss", "dup-logits", "k-early", "static-q", "no-qscale"]
SLOTS = {"hack-8": 8}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=[], help="B,N (16 heads, one token)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default=",".join(VARIANTS))
    parser.add_argument("--workers", type=int, default=None,
                        help="the plan's workers (default: one per SM; 0: the plan heuristic's)")
    args = parser.parse_args()
    names = args.only.split(",")
    kernels = {name: load_patched(f"rs_ablate_{name.replace('-', '_')}", _source(name))._mla_decode_ws16_rs_kernel
               for name in names}
    original = _triton_decode._mla_decode_ws16_rs_kernel
    before = _triton_decode.WS16_KERNEL
    slots = _triton_decode.WS16_RS_SLOTS
    workers = torch.cuda.get_device_properties(0).multi_processor_count if args.workers is None else args.workers
    _triton_decode.WS16_KERNEL = "registers"
    try:
        for text in args.case or ["64,4096"]:
            b, n = (int(x) for x in text.split(","))
            case = Case(b, n, 16, 1, fp8=True)
            plan = case.plan(workers or None)
            for _ in range(args.repeat):
                for name, kernel in kernels.items():
                    _triton_decode._mla_decode_ws16_rs_kernel = kernel
                    _triton_decode.WS16_RS_SLOTS = SLOTS.get(name, slots)
                    try:
                        us = _time_graph(case.run(plan, dataclasses.replace(WS16))) * 1e3 / case.copies
                    finally:
                        _triton_decode._mla_decode_ws16_rs_kernel = original
                        _triton_decode.WS16_RS_SLOTS = slots
                    print(f"B{b} N{n} W{plan.num_partitions} {name}: {us:.1f} us {case.bytes / us / 1e6:.2f} TB/s", flush=True)
    finally:
        _triton_decode.WS16_KERNEL = before


if __name__ == "__main__":
    main()
