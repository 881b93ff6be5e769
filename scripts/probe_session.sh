#!/usr/bin/env bash
# One device call (edit per session). Twenty-third session, second part: compute-sanitizer's memcheck over the
# register-operand 16-row FP8 kernel in the order that once failed to launch (rs_memcheck.py), the decode and
# combine kernels' device times at 16 heads (torch.profiler, the plan's own workers), the automatic kernel choice's
# gpu test, and the harness at B32 N4096 (which WS16_RS_MIN_BLOCKS 12 moved to the register kernel).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
export PYTHONPATH=src:benchmarks
f="$OUT/memcheck-$COMMIT.txt"
timeout 240 compute-sanitizer --tool memcheck --print-limit 5 python3 benchmarks/experiments/rs_memcheck.py \
  64,4096 128,4096 > "$f" 2>&1
echo "memcheck rc $?"; grep -v Warn "$f" | tail -6
timeout 90 python3 - <<'PY' 2>&1 | grep -v Warn | tee "$OUT/kernel-times-$COMMIT.txt"
import dataclasses
from decode_probe import Case, kernel_times
from pagedmla.configs.decode import WS16
from pagedmla.ops import _triton_decode
_triton_decode.WS16_KERNEL = "registers"  # decode_probe's calls pass no long_pieces
for fp8 in (False, True):
    for b in (64, 128):
        case = Case(b, 4096, 16, 1, fp8=fp8)
        plan = case.plan(None)
        times = kernel_times(case.run(plan, dataclasses.replace(WS16) if fp8 else None))
        print(f"B{b} N4096 {'fp8' if fp8 else 'bf16'} W{plan.num_partitions}:",
              ", ".join(f"{k[:40]} {v:.1f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1])))
PY
f="$OUT/gpu-tests-choice-$COMMIT.txt"
PYTHONPATH=src timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_decode_triton.py -k automatic > "$f" 2>&1
echo "tests rc $?"; tail -1 "$f"
f="$OUT/bench-decode-h16-b32-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 32 --keys 4096 --kv-dtype bf16 fp8 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -3 "$f"
