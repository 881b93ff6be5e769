#!/usr/bin/env bash
# One device call (edit per session). Twenty-eighth session, call 8: the 64-row decode merging split sequences
# itself (FUSED: a grid barrier, then an in-kernel merge; no combine kernel) against kernel + combine at batch 1,
# here the barrier without the wait for the TMA stores, and that wait alone (no merge). The experiment
# (benchmarks/experiments/fused_merge.py) and the FUSED kernel were removed after this call; both are in 810d465.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/fused-merge-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/fused_merge.py --case 1,16384,128 \
  --case 1,4096,128 --repeat 2 --kernel-only --variants no-merge no-complete complete-only > "$f" 2>&1
echo "fused rc $?"; cat "$f" | tail -40
