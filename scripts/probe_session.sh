#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 11: the combine with a second, small tile of
# pieces per step (CombineConfig.block_t): 67 pieces as 64 + 4 lanes instead of 128, at batch 1.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-combine-tail-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 300 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 1,16384,16 --repeat 3 --combines shipped \
  --combine-tiles default 64,1,32,1,1,4 32,1,32,1,1,2 128,1,32,4,1,2 > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -40
