#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized decode with diagnostic knobs
# (benchmarks/experiments/decode_ws_knobs.py) to see what limits it.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src:benchmarks:benchmarks/experiments PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for k in 0 1 2 4 8 6 3; do
  DECODE_WS_KNOBS=$k timeout 100 python3 benchmarks/experiments/decode_ws_knob_probe.py 2>&1 | grep -E "knobs|Error" \
    | tee -a "$OUT/decode-ws-knobs-$COMMIT.txt"
done
