#!/usr/bin/env bash
# One device call (edit per session). This one: `bench decode` after the unmasked interior became 64-row only.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 110 python3 -m pagedmla.cli bench decode --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/decode.json" \
  > "$OUT/decode.txt" 2>&1
grep -v "^\[" "$OUT/decode.txt" | tail -14
timeout 40 python3 -m pytest -q -m gpu tests/test_decode_triton.py -k "H16 and bf16" -p no:cacheprovider -x 2>&1 | tail -2
