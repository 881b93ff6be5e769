"""Repeats the 16-row FP8 decode (`pagedmla.kernels.mla_decode_ws16`, through `launch_decode` with its config) on
schedules of one to seven workers (long pieces; many short sequences each) and prints each sequence's max
error against the float32 reference, and whether the output differs bit for bit from the first repetition's
(the kernel is deterministic: any difference is a race, however small). The kernel's own rounding stays at or
below 0.027 on these data; a sequence above 0.05 is listed.

    PYTHONPATH=src python3 benchmarks/experiments/ws16_stress.py [--reps 3] [--set WS16_SLOTS=2]

It switches the kernel on (`_triton_decode.WS16_ENABLED`). To stress a variant, check it out (e.g. the fp16
MMAs of commit a765cb4) and set its launcher constants with `--set NAME=VALUE` (there: `--set WS16_F16=1`).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import pagedmla as pm
import test_decode_triton as T
from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode

CASES = {"q1": (1000, 0, 63, 4000, 129), "B40": tuple((53 * i) % 900 for i in range(40))}


def run(case: str, parts: int, mask: str) -> tuple[list[float], torch.Tensor]:
    cache = CASES[case]
    pb, q = T.batch(list(cache), [1] * len(cache), heads=16, head_size=576, page_size=64, dtype=torch.bfloat16,
                    seed=80, device="cuda")
    sink = torch.randn(16, generator=torch.Generator().manual_seed(85)).cuda() if mask == "causal" else None
    kv = pm.quantize_kv_cache(pb.kv, rope_aware=True, qk_rope_head_dim=64)
    got, _ = T.run_launcher(pb, kv, q, WS16, parts=parts, rope=64, mask=mask, window=0, sink=sink)
    want, _ = T.fp8_reference(pb, kv, q.float(), mask=mask, window=-1, sink=sink, rope=64)
    return (got.float() - want).abs().nan_to_num(99.0).amax(dim=(1, 2)).tolist(), got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE: the launcher's constant NAME")
    args = parser.parse_args()
    _triton_decode.WS16_ENABLED = True
    for item in args.set:
        name, value = item.split("=")
        setattr(_triton_decode, name, int(value))
    worst, changed, first = 0.0, 0, {}
    for rep in range(args.reps):
        for case in CASES:
            for mask in ("causal", "null"):
                for parts in (1, 2, 4, 7):
                    err, got = run(case, parts, mask)
                    worst = max(worst, max(err))
                    bad = [i for i, e in enumerate(err) if e > 0.05]
                    ref = first.setdefault((case, mask, parts), got)
                    same = torch.equal(got.view(torch.int16), ref.view(torch.int16))
                    changed += not same
                    print(f"rep {rep} {case} {mask:6s} W{parts}: max {max(err):.3f}"
                          + (f" sequences over 0.05: {bad}" if bad else "")
                          + ("" if same else " output differs from rep 0"), flush=True)
    print(f"worst {worst:.3f}, runs differing from rep 0: {changed}")


if __name__ == "__main__":
    main()
