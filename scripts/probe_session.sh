#!/usr/bin/env bash
# One device call (edit per session). This one: the harness's decode suite (16 and 128 heads) after the combine's
# 128-piece tile for batch 1.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for suite in decode; do
  timeout 240 python3 -m pagedmla.cli bench $suite --no-reference --commit "$COMMIT" --json "$OUT/bench-$suite-$COMMIT.json" \
    > "$OUT/bench-$suite-$COMMIT.txt" 2>"$OUT/bench-$suite-$COMMIT.stderr"
  echo "bench $suite rc $?"; tail -22 "$OUT/bench-$suite-$COMMIT.txt"
done
