#!/usr/bin/env bash
# One device call (edit per session). This one: A/B of BASE (1d49631, before the review's changes) and COMMIT
# at the large 16-head cases whose samples spread in the last calls (B64 N16384, B128 N8192), alternating.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh  (BASE's src in ab_base/)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 60 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 8192 16384 \
      --kv-dtype bf16 --no-reference --commit "$rev" --json "$OUT/ab-large-$rev-run$run.json" \
      > "$OUT/ab-large-$rev-run$run.txt" 2>&1
    echo "== $rev run $run rc $?"; grep -E "^decode" "$OUT/ab-large-$rev-run$run.txt" | awk '{print $2,$3,$4,$7,$8,$11}'
  done
done
