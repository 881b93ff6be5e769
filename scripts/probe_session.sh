#!/usr/bin/env bash
# One device call (edit per session). This one: does the split-KV partials' L2 hint (stores with evict_last,
# 435be7d) still pay when other memory traffic runs between decode calls (an engine's other kernels between two
# layers)? BASE (ab_base/, the tree before the hint) against COMMIT (src/), alternating, two runs each, at 16
# heads B64 and B128 N4096. Carry ab_base, made with `git archive <sha> src | tar -x -C ab_base`.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    for case in 64,4096,16 128,4096,16; do
      echo "== ${rev:0:7} run $run" >> "$OUT/l2-between-calls.txt"
      PYTHONPATH=$path timeout 90 python3 benchmarks/experiments/l2_between_calls.py --case $case \
        >> "$OUT/l2-between-calls.txt" 2>&1
      echo "rc $?" >> "$OUT/l2-between-calls.txt"
    done
  done
done
cat "$OUT/l2-between-calls.txt"
