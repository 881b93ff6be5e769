#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row FP8 kernel as landed (lazy softmax, widen warps
# reading one half ahead, 128 widen registers): its gpu tests and the harness at 16 heads (B64, B128 N4096;
# B1 N16384), bf16 and FP8.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k ws16 \
  > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED" "$f" | head -8
for args in "--batch 64 128 --keys 4096" "--batch 1 --keys 16384"; do
  tag=$(echo "$args" | tr -d ' -' | cut -c1-24)
  f="$OUT/bench-decode-h16-$tag-$COMMIT.txt"
  PYTHONPATH=src timeout 70 python3 -m pagedmla.cli bench decode --heads 16 $args --kv-dtype bf16 fp8 \
    --no-reference --commit "$COMMIT" --json "$OUT/bench-decode-h16-$tag-$COMMIT.json" > "$f" 2>&1
  echo "bench rc $?"; grep -vE "^\s*$" "$f" | cut -c1-150 | tail -5
done
