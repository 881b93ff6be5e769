#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 1: bounds at 128 heads batch 1 (issue 4's last
# target): the decode's prologue with its loads before the wait (`late-wait`), half of the partials' bytes
# (`half-partials`, combine `half`), no combine work (`empty`); then the harness at the commit.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-bounds-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 420 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --repeat 2 --bounds late-wait half-partials late-wait+half --combines shipped half empty \
  > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | tail -60
f="$OUT/bench-decode-h128-b1-$COMMIT.txt"
PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 16384 4096 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; grep -E "^ceilings" "$f"; tail -4 "$f"
