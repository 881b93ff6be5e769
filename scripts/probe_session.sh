#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 10: batch 1 at 128 heads with fewer workers,
# so that the combine's piece tile (a power of two at least the pieces the heuristic expects, W / B + 1) halves:
# 66 workers merge 128 lanes for 67 pieces, 63 workers 64 lanes; and the default plan with 64-piece combine steps.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/rs-tail-b1-workers-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 300 python3 benchmarks/experiments/rs_tail.py --case 1,16384,128 \
  --case 1,4096,128 --workers 63 64 62 31 32 --repeat 2 > "$f" 2>&1
echo "rs_tail rc $?"; grep -v "^$" "$f" | tail -40
f="$OUT/ws-combine-steps-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 --repeat 2 \
  --combines shipped --combine-tiles default 64,1,32,1 > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | tail -8
