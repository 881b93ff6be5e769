#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 2: batch 1 at 128 heads. The 64-row kernel's
# piece start (ws_start.py: q first, block b after block a on the first piece) and the combine's first loads
# before its wait, A/B in one run; then the timeline with consumer 0's epilogue stamped, at START 0 and 2.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-start-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 240 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,128 --case 64,4096,16 --case 128,4096,16 --repeat 2 > "$f" 2>&1
echo "start rc $?"; grep -v Warn "$f" | tail -40
for s in 0 2; do
  f="$OUT/ws-timeline-s$s-$COMMIT.txt"
  PYTHONPATH=src:benchmarks timeout 90 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 \
    --start $s --json "$OUT/ws-timeline-s$s-$COMMIT.json" > "$f" 2>&1
  echo "timeline start=$s rc $?"; sed -n 2,20p "$f"
done
