#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 9: the combine without its early trigger of
# the next kernel (`no-trigger`), at batch 1 (128 heads) and B64 (128 heads bf16, 16 heads FP8).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-combine-trigger-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 300 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,16 --case 64,4096,128 --repeat 3 --partials float \
  --combines shipped no-trigger > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -30
