#!/usr/bin/env bash
# One device call (edit per session). This one, after the review: the ring's plan chain on the GPU (32-key units,
# two workers per SM), the refactored graph-replay tests, the public dispatch.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring_plan or graph_replay or public_dispatch or ring_depths" > "$OUT/gpu-tests-review-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-review-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-review-$COMMIT.txt" | head
