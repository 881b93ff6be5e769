#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 2: the combine discarding the partial rows it
# merged from L2 (`discard.global.L2`, no write-back of dead scratch) against the shipped combine, at 128 heads
# batch 1 and at B64 (16 heads FP8, 128 heads bf16).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-discard-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 420 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,16 --case 64,4096,128 --repeat 3 --bounds half-partials \
  --combines shipped discard half > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -80
