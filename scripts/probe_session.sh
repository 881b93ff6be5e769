#!/usr/bin/env bash
# One device call (edit per session). This one: the decode gpu tier (dense ring kernel, exact-span plan), the
# sparse ring tests (shared helpers), then the harness's 16-head decode rows (bf16 and the rope-aware FP8 row).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  > "$OUT/gpu-tests-decode-$COMMIT.txt" 2>&1
echo "decode tests rc $?"; tail -2 "$OUT/gpu-tests-decode-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-decode-$COMMIT.txt" | head -20
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py -k ring \
  > "$OUT/gpu-tests-sparse-ring-$COMMIT.txt" 2>&1
echo "sparse ring tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-ring-$COMMIT.txt"
timeout 150 python3 -m pagedmla.cli bench decode --heads 16 --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-decode-h16-$COMMIT.json" > "$OUT/bench-decode-h16-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^decode" "$OUT/bench-decode-h16-$COMMIT.txt" | cut -c1-140
