#!/usr/bin/env bash
# One device call (edit per session). This one: the harness at the session's final code (after the review's
# changes: guarded grid dependency control, the switch, the combine reading nothing before its wait), at the
# 16- and 128-head batch-1 and B64 cases, twice.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for run in 1 2; do
  timeout 120 python3 -m pagedmla.cli bench decode --heads 16 128 --batch 1 64 --keys 4096 16384 --kv-dtype bf16 \
    --no-reference --commit "$COMMIT" --json "$OUT/final-decode-$COMMIT-run$run.json" \
    > "$OUT/final-decode-$COMMIT-run$run.txt" 2>&1
  echo "== run $run rc $?"; grep -E "^ceilings|^decode" "$OUT/final-decode-$COMMIT-run$run.txt" | awk '{print $1,$2,$3,$4,$7,$11}'
done
