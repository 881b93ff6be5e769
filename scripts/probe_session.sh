#!/usr/bin/env bash
# One device call (edit per session). This one: main after the guard moved to one call site (53a6707): the
# 16-head decode gpu tests and `bench decode --heads 16`.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu tests/test_decode_triton.py -k "H16 or variants or graph or partitions" \
  -p no:cacheprovider -rf > "$OUT/gpu-tests-h16.log" 2>&1; echo "tests rc=$?"; tail -2 "$OUT/gpu-tests-h16.log"
timeout 80 python3 -m pagedmla.cli bench decode --heads 16 --no-reference --commit "${COMMIT:-unknown}" \
  > "$OUT/decode16.txt" 2>&1
grep -v "^\[" "$OUT/decode16.txt" | tail -9
