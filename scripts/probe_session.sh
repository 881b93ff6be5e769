#!/usr/bin/env bash
# One device call (edit per session). This one: the prefill's folded exponent (same-run A/B) and 64-row,
# one-warpgroup tiles (two programs per SM), after the prefill gpu tests.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -m gpu tests/test_prefill_triton.py -p no:cacheprovider 2>&1 | tail -2
timeout 330 python3 benchmarks/prefill_probe.py --only prefill --config default --config default,nofold \
  --config 64,64,4,2 --config 64,64,4,3 --config 64,64,4,2,inner --json "$OUT/prefill.json" > "$OUT/prefill.txt" 2>&1
grep -E "^prefill|FAILED|compiled" "$OUT/prefill.txt"
