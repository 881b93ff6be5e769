#!/usr/bin/env bash
# One device call (edit per session). This one: a second run of the harness's prefill suite (the two-partition
# Gluon prefill was measured once), at a commit whose kernels are those of 17a96fe.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pagedmla.cli bench prefill --no-reference --commit "$COMMIT" --json "$OUT/bench-prefill-$COMMIT.json" \
  > "$OUT/bench-prefill-$COMMIT.txt" 2>"$OUT/bench-prefill-$COMMIT.stderr"
echo "bench rc $?"; tail -11 "$OUT/bench-prefill-$COMMIT.txt"
