#!/usr/bin/env bash
# One device call (edit per session). This one: the seesaw warp-specialized decode with diagnostic knobs
# (benchmarks/experiments/decode_ws_seesaw_knobs.py) to see what limits it.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src:benchmarks:benchmarks/experiments PYTHONUNBUFFERED=1 DECODE_WS_KNOB_MODULE=decode_ws_seesaw_knobs
OUT=${OUT:-out}; mkdir -p "$OUT"
for k in 0 1 8 9; do
  DECODE_WS_KNOBS=$k timeout 100 python3 benchmarks/experiments/decode_ws_knob_probe.py 2>&1 | grep -E "knobs|Error" \
    | tee -a "$OUT/decode-ws-seesaw-knobs-$COMMIT.txt"
done
