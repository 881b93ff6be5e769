#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 6: where fp16 split partials lose time at
# batch 1 (128 heads): fp16 against float32 partials with the shipped combine and with a combine that merges
# nothing (`empty`: the decode kernel's share alone).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-partials-split-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 300 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --repeat 3 --partials half float --combines shipped empty > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -30
