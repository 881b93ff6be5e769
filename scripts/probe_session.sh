#!/usr/bin/env bash
# One device call (edit per session). This one: opaque slot indices in the dense warp-specialized decode too (its
# spills 280 -> 56 bytes): the sparse gpu tier, the dense warp-specialized tests, then the harness at 128 heads
# (dense B1 / B64 / B128 and FP8 sparse) for this tree and BASE (ab_base/src) in the same call.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "sparse tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k "warp_specialized" \
  > "$OUT/gpu-tests-decode-ws-$COMMIT.txt" 2>&1
echo "ws tests rc $?"; tail -1 "$OUT/gpu-tests-decode-ws-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-decode-ws-$COMMIT.txt" | head
for tree in "$COMMIT:src" "$BASE:ab_base/src"; do
  sha=${tree%%:*}; src=${tree#*:}
  PYTHONPATH=$src timeout 90 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 64 128 --keys 4096 16384 \
    --no-reference --commit "$sha" --json "$OUT/bench-decode-h128-$sha.json" > "$OUT/bench-decode-h128-$sha.txt" 2>&1
  echo "decode $sha rc $?"; grep -E "^decode|ceiling" "$OUT/bench-decode-h128-$sha.txt" | cut -c1-130
done
timeout 60 python3 -m pagedmla.cli bench sparse --heads 128 64 --batch 64 128 --keys 32768 --kv-dtype fp8 \
  --no-reference --commit "$COMMIT" --json "$OUT/bench-sparse-fp8-$COMMIT.json" > "$OUT/bench-sparse-fp8-$COMMIT.txt" 2>&1
echo "sparse rc $?"; grep -E "^sparse|ceiling" "$OUT/bench-sparse-fp8-$COMMIT.txt" | cut -c1-130
