#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized cases under the plain chunked mask (added
# after the review), and the heuristic's dispatch test.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "(test_gpu_warp_specialized and chunked-50) or takes_warp_specialized" > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
