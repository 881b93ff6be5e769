#!/usr/bin/env bash
# One device call (edit per session). This one, after a review: the whole sparse gpu tier (new: whole-row ring
# cases with rows of no key and a sink, fp16 whole rows) and the harness's 16-head rows, with the FP8 ring's
# e4m3 tiles copied 16 bytes at a time (they were 8).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 100 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 fp8 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-fp8-$COMMIT.json" > "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" 2>&1
echo "bench h16 rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" | cut -c1-160
