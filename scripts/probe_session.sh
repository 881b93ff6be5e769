#!/usr/bin/env bash
# One device call (edit per session). This one: the timeline of the 16-row ring decode's programs
# (benchmarks/experiments/ring_timeline.py), then an A/B of the harness: COMMIT against a measurement-only copy
# whose dense Gluon decode kernels do not wait for the previous kernel (ab_nowait/: unsafe, it bounds what
# overlapping a call's start with the previous kernel could gain).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh  (the copy's src in ab_nowait/)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 200 python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 \
  --case 128,4096,16,1 --case 64,4096,16,1,fp8 --json "$OUT/ring-timeline-$COMMIT.json" \
  2>&1 | tee "$OUT/ring-timeline-$COMMIT.txt" | grep -vE "^\s+(entry|prologue)"
echo "timeline rc $?"
for run in 1 2; do
  for tree in "nowait:ab_nowait/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 120 python3 -m pagedmla.cli bench decode --heads 16 128 --batch 1 64 --keys 4096 16384 \
      --kv-dtype bf16 --no-reference --commit "$rev" --json "$OUT/ab-decode-$rev-run$run.json" \
      > "$OUT/ab-decode-$rev-run$run.txt" 2>&1
    echo "== $rev run $run rc $?"; grep -E "^ceilings|^decode" "$OUT/ab-decode-$rev-run$run.txt" | awk '{print $1,$2,$3,$4,$7,$11}'
  done
done
