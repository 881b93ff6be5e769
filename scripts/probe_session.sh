#!/usr/bin/env bash
# One device call (edit per session). This one: diagnostic knobs of the Gluon sparse decode (skip the copies, the
# widening, the index loads; outputs wrong, times only) at the V3.2 shape (120 s cap).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src:benchmarks PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 benchmarks/experiments/sparse_ws_knobs.py > "$OUT/sparse-ws-knobs-$COMMIT.txt" 2>&1
echo "rc $?"; tail -12 "$OUT/sparse-ws-knobs-$COMMIT.txt"
