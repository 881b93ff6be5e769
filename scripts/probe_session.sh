#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 8: combine tiles for fp16 and float32 split
# partials at batch 1 (128 heads): the heuristic's (128 pieces, 1 row, 32 columns, 1 warp) against wider ones.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-combine-tiles-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 300 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --repeat 2 --partials half float --combines shipped \
  --combine-tiles default 128,1,64,2 128,1,128,4 128,2,64,4 > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -40
