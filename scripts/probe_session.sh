#!/usr/bin/env bash
# One device call (edit per session). This one: how much of the warp-specialized decode's epilogue is its
# stores' memory traffic? benchmarks/experiments/ws_timeline.py at batch 1 N16384 and B64 N4096, 128 heads, with
# the stores as they are and with them predicated off (--no-stores), alternating, two runs.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-timeline-stores-$COMMIT.txt"
for run in 1 2; do
  for flag in "" "--no-stores"; do
    echo "== run $run ${flag:-stores}" >> "$f"
    PYTHONPATH=src timeout 120 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 \
      --case 64,4096,128,1 $flag --json "$OUT/ws-timeline-r$run${flag:+-nostores}.json" >> "$f" 2>&1
    echo "rc $?" >> "$f"
  done
done
grep -E "^==|^case|  call|loop_end|exit_c|epilogue_us|loop_us" "$f" | cut -c1-140
