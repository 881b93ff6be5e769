#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row warp-specialized FP8 decode (`kernels.mla_decode_ws16`)
# with its widening moved as int32 values: gpu tests, its timeline, and whole calls against the shipped path.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ws16" -x > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
rc=$?
echo "tests rc $rc"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 \
  > "$OUT/ws16-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"; grep phases "$OUT/ws16-timeline-$COMMIT.txt" | tr "," "\n" | tr "\n" " "; echo
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 --case 128,4096 \
  --case 1,16384 --variant widen_warps=8 --variant widen_warps=4 > "$OUT/ws16-variants-$COMMIT.txt" 2>&1
echo "variants rc $?"
cat "$OUT/ws16-variants-$COMMIT.txt" | cut -c1-150
