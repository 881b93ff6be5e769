#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row FP8 kernel's widen warps reading one half ahead
# (WS16_WIDEN_PIPELINE): the ws16 gpu tests and ws16_stress.py with it on (and 128 widen registers), and an
# in-process A/B (ws16_variants.py).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-pipeline-$COMMIT.txt"
PYTHONPATH=src timeout 100 python3 - > "$f" 2>&1 <<PY
import sys, pytest
import pagedmla.ops._triton_decode as t
t.WS16_WIDEN_PIPELINE = True
t.WS16_WIDEN_REGS = 128
sys.exit(pytest.main(["-q", "-m", "gpu", "-p", "no:cacheprovider", "-rf", "tests/test_decode_triton.py", "-k", "ws16"]))
PY
echo "ws16 tests (pipeline) rc $?"; tail -1 "$f"; grep -E "^FAILED" "$f" | head -8
PYTHONPATH=src timeout 45 python3 benchmarks/experiments/ws16_stress.py --reps 1 --set WS16_WIDEN_PIPELINE=1 \
  --set WS16_WIDEN_REGS=128 > "$OUT/stress-pipeline-$COMMIT.txt" 2>&1
echo "stress rc $?"; grep -E "over|worst|Error|differ" "$OUT/stress-pipeline-$COMMIT.txt" | head -8
f="$OUT/ab-pipeline-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 120 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 \
  --case 128,4096 --variant pipeline=0 \
  --variant pipeline=1 --variant pipeline=1,widen_regs=128 --repeat 1 > "$f" 2>&1
echo "ab rc $?"; grep -v "^#" "$f" | sed 's/ TB\/s.*//'
