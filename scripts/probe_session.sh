#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row FP8 kernel with fp16 MMAs (WS16_F16) and the lazy
# softmax (WS16_LAZY_RESCALE): the ws16 gpu tests with fp16 off (the shipped setting) and on,
# benchmarks/experiments/ws16_stress.py both ways, and an in-process A/B of the four settings (ws16_variants.py).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for f16 in 0 1; do
  f="$OUT/gpu-tests-ws16-f16=$f16-$COMMIT.txt"
  PYTHONPATH=src timeout 150 python3 - > "$f" 2>&1 <<PY
import sys, pytest
import pagedmla.ops._triton_decode as t
t.WS16_F16 = bool($f16)
sys.exit(pytest.main(["-q", "-m", "gpu", "-p", "no:cacheprovider", "-rf", "tests/test_decode_triton.py", "-k", "ws16"]))
PY
  echo "ws16 tests f16=$f16 rc $?"; tail -1 "$f"; grep -E "^FAILED" "$f" | head -8
  PYTHONPATH=src timeout 60 python3 benchmarks/experiments/ws16_stress.py --reps 2 --set WS16_F16=$f16 \
    > "$OUT/stress-f16=$f16-$COMMIT.txt" 2>&1
  echo "stress f16=$f16 rc $?"; grep -E "over|worst|Error|differ" "$OUT/stress-f16=$f16-$COMMIT.txt" | head -8
done
f="$OUT/ab-f16-lazy-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 \
  --case 128,4096 --case 1,16384 --variant f16=0,lazy=0 --variant f16=0,lazy=1 --variant f16=1,lazy=0 \
  --variant f16=1,lazy=1 --repeat 2 > "$f" 2>&1
echo "ab rc $?"; grep -v "^#" "$f" | sed 's/ TB\/s.*//'
