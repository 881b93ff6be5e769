#!/usr/bin/env bash
# One device call (edit per session). This one: the final check of the session's code (the combine's 128-piece
# tile): the whole decode and sparse gpu tiers (420 s cap).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 420 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  tests/test_sparse_decode_triton.py > "$OUT/gpu-tests-decode-sparse-$COMMIT.txt" 2>&1
echo "rc $?"; tail -2 "$OUT/gpu-tests-decode-sparse-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-decode-sparse-$COMMIT.txt" | head
