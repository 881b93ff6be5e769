#!/usr/bin/env bash
# One device call (edit per session). This one: where the warp-specialized decode's time goes at batch 1 and 128
# heads (benchmarks/experiments/ws_timeline.py: stamped copy of the kernel in a graph of back-to-back calls), with
# B64 N4096 at 128 heads beside it, then the same case's kernel profile for the unstamped kernel.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 200 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 --case 1,4096,128,1 \
  --case 64,4096,128,1 --json "$OUT/ws-timeline-$COMMIT.json" > "$OUT/ws-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"
PYTHONPATH=src timeout 90 python3 benchmarks/decode_probe.py --case 1,16384,128,1 --case 1,4096,128,1 --profile \
  >> "$OUT/ws-timeline-$COMMIT.txt" 2>&1
cat "$OUT/ws-timeline-$COMMIT.txt" | grep -v Warning | cut -c1-150 | tail -80
