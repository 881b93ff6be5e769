#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized sparse decode (64-row tiles, rope-aware FP8):
# its gpu tests, then the harness's FP8 sparse rows at 64 and 128 heads, this tree and BASE (ab_base/src) in turn.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "ws or v32_shapes" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -20
for tree in "$COMMIT:src" "$BASE:ab_base/src"; do
  sha=${tree%%:*}; src=${tree#*:}
  PYTHONPATH=$src timeout 120 python3 -m pagedmla.cli bench sparse --heads 128 64 --batch 64 128 --keys 32768 \
    --kv-dtype fp8 --no-reference --commit "$sha" --json "$OUT/bench-sparse-fp8-$sha.json" \
    > "$OUT/bench-sparse-fp8-$sha.txt" 2>&1
  echo "bench $sha rc $?"; grep -E "sparse|ceiling" "$OUT/bench-sparse-fp8-$sha.txt" | cut -c1-150
done
