#!/usr/bin/env bash
# One device call (edit per session). This one: the harness's 16-head sparse rows on the rope-aware FP8 cache
# (the Triton kernel; the ring kernel takes bf16/fp16 only) next to the bf16 ones, B64 and B128.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 fp8 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-fp8-$COMMIT.json" > "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" | cut -c1-160
