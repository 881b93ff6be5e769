#!/usr/bin/env bash
# One device call (edit per session). This one: the shipped 16-row FP8 decode (`kernels.mla_decode_ws16`) under
# repetition: its gpu tests, then benchmarks/experiments/ws16_stress.py on it and on the fp16 + split-W experiment
# (benchmarks/experiments/ws16_f16_split.patch, applied to a copy of the tree).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k ws16 \
  > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED" "$f" | head -12
f="$OUT/stress-shipped-$COMMIT.txt"
PYTHONPATH=src timeout 120 python3 benchmarks/experiments/ws16_stress.py --reps 3 > "$f" 2>&1
echo "stress shipped rc $?"; grep -E "over|worst|Error" "$f" | head -20
exp=$(mktemp -d); cp -r . "$exp/"; cd "$exp"
patch -p1 -s < benchmarks/experiments/ws16_f16_split.patch && echo "patched"
for v in 1 0; do
  PYTHONPATH=src timeout 120 python3 benchmarks/experiments/ws16_stress.py --reps 2 --set WS16_F16=$v \
    > "$OUT/stress-split-f16$v-$COMMIT.txt" 2>&1
  echo "stress split f16=$v rc $?"; grep -E "over|worst|Error" "$OUT/stress-split-f16$v-$COMMIT.txt" | head -12
done
