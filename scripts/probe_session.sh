#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 1: what the plan's worker count does to the
# register FP8 kernel at B64 (rs_tail.py --workers), and where batch 1 at 128 heads spends its time (rs_tail.py
# on the 128-head case: the combine's cost; ws_timeline.py: the kernel's stamps).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/rs-tail-workers-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 150 python3 benchmarks/experiments/rs_tail.py --case 64,4096 --case 128,4096 \
  --workers 128 130 132 --repeat 2 > "$f" 2>&1
echo "tail rc $?"; cat "$f" | grep -v Warn | tail -24
f="$OUT/tail-h128-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 90 python3 benchmarks/experiments/rs_tail.py --case 1,16384,128 --case 1,4096,128 \
  --repeat 2 > "$f" 2>&1
echo "tail128 rc $?"; cat "$f" | grep -v Warn | tail -12
f="$OUT/ws-timeline-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 90 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 \
  --json "$OUT/ws-timeline-$COMMIT.json" > "$f" 2>&1
echo "timeline rc $?"; cat "$f" | tail -30
