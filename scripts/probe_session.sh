#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 3: batch 1 at 128 heads, a worker's first two
# table entries loaded from its schedule row (`early-pages`, one dependent load fewer), with and without half of
# the partials' bytes (`half-partials` + combine `half`).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-early-pages-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 420 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --repeat 3 --bounds early-pages half-partials early-pages+half --combines shipped half \
  > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -60
