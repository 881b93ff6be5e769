#!/usr/bin/env bash
# One device call (edit per session). This one: the logits' MMA split across warpgroups for 64-row FP8 dense
# and sparse tiles too: the FP8 decode gpu tests and the sparse gpu tier, then the harness's sparse suite and
# the 128-head FP8 dense decode.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 250 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py tests/test_sparse_decode_triton.py \
  -k "fp8 or sparse or v32" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 150 python3 -m pagedmla.cli bench sparse --no-reference --json "$OUT/bench-sparse.json" > "$OUT/bench-sparse.txt" 2>&1
timeout 100 python3 -m pagedmla.cli bench decode --heads 128 --batch 64 128 --keys 4096 --kv-dtype fp8 --no-reference \
  --json "$OUT/bench-decode-fp8.json" > "$OUT/bench-decode-fp8.txt" 2>&1
grep -E "^ceilings|^case|^decode|^sparse" "$OUT/bench-sparse.txt" "$OUT/bench-decode-fp8.txt" | sed 's/^.*txt://' | cut -c1-150
