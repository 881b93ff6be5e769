#!/usr/bin/env bash
# One device call (edit per session). This one: the ring decode's timeline with each program's SM (which programs
# run late, and why), at the default 256 workers and at 264 (two per SM on every SM), then whole calls at 256,
# 260 and 264 workers.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 --case 64,4096,16,1,fp8 \
  --json "$OUT/ring-timeline-$COMMIT.json" > "$OUT/ring-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"; grep -vE "^\s+(prologue)" "$OUT/ring-timeline-$COMMIT.txt"
timeout 100 python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 --workers 264 \
  --json "$OUT/ring-timeline-w264-$COMMIT.json" > "$OUT/ring-timeline-w264-$COMMIT.txt" 2>&1
echo "timeline w264 rc $?"; grep -vE "^\s+(prologue)" "$OUT/ring-timeline-w264-$COMMIT.txt"
timeout 200 python3 benchmarks/decode_probe.py --sweep --ring-plan --workers 256,260,264 --case 64,4096,16,1 \
  --case 128,4096,16,1 --config 16,32,4,1,ring2 > "$OUT/probe-workers-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|W[0-9]+ " "$OUT/probe-workers-$COMMIT.txt"
