#!/usr/bin/env bash
# One device call (edit per session). This one: the dense ring kernel with per-block page slots (no division per
# key) against the sparse ring on the same rows; its gpu tests; whether ncu is there.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
which ncu nsys 2>&1 | head -3; ls /usr/local/cuda*/bin 2>/dev/null | grep -E "ncu|nsys" | head
timeout 150 python3 benchmarks/experiments/ring_pattern_ab.py > "$OUT/ring-ab-$COMMIT.txt" 2>&1
echo "ab rc $?"; cat "$OUT/ring-ab-$COMMIT.txt" | tail -8
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/test_decode_triton.py -k "ring" \
  > "$OUT/gpu-tests-ring-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-ring-$COMMIT.txt"; grep -E "^FAILED|Error|error" "$OUT/gpu-tests-ring-$COMMIT.txt" | head -20
