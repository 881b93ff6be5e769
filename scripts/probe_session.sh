#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 8 (final): the harness's batch-1 rows at 128 heads
# and its 16-head bf16 / FP8 rows, each run twice, and the 64-row kernel's timeline at batch 1 N16384.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for run in 1 2; do
  f="$OUT/bench$run-decode-h128-b1-$COMMIT.txt"
  PYTHONPATH=src timeout 100 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 16384 4096 \
    --no-reference > "$f" 2>&1
  echo "bench rc $?"; tail -3 "$f"
done
for run in 1 2; do
  f="$OUT/bench$run-decode-h16-$COMMIT.txt"
  PYTHONPATH=src timeout 100 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
    --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
  echo "bench rc $?"; tail -5 "$f"
done
f="$OUT/ws-timeline-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 90 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 \
  --json "$OUT/ws-timeline-$COMMIT.json" > "$f" 2>&1
echo "timeline rc $?"; sed -n 2,18p "$f"
