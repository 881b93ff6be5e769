#!/usr/bin/env bash
# One device call (edit per session). This one: the final code (64-row tiles' opaque value is now the page size;
# two-per-SM tiles for the rope-aware cache only, FP8 q at 2 stages): gpu tests of the two-per-SM tile, the
# 64-row decode launch variants and DeepSeek shapes, the 128-head sparse cases; then the harness at 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py tests/test_sparse_decode_triton.py \
  -k "two_programs or (launch_variants and H128) or (deepseek_shapes and 128) or (v32 and H128)" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 60 python3 -m pagedmla.cli bench decode --heads 128 --batch 64 128 --keys 4096 --no-reference \
  --json "$OUT/bench-decode.json" > "$OUT/bench-decode.txt" 2>&1
timeout 40 python3 -m pagedmla.cli bench sparse --heads 128 --batch 64 --no-reference --json "$OUT/bench-sparse.json" \
  > "$OUT/bench-sparse.txt" 2>&1
grep -E "^ceilings|^decode|^sparse" "$OUT/bench-decode.txt" "$OUT/bench-sparse.txt" | sed 's/^.*txt://' | cut -c1-120
