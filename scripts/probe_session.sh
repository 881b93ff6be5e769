#!/usr/bin/env bash
# One device call (edit per session). This one: the prefill's 128 x 64 tiles at 2 stages (no serialized warpgroup
# MMAs in sm_90a) against 3 stages (the heuristic's for prompts of 2048 rows or fewer) and the default.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/prefill_probe.py --only prefill --config 128,128,8,2 --config 128,64,8,2 \
  --config 128,64,8,3 > "$OUT/prefill.txt" 2>&1
grep -E "^prefill|FAILED|compiled" "$OUT/prefill.txt"
