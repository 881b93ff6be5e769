#!/usr/bin/env bash
# One device call (edit per session). This one: the decode gpu tests (the unmasked interior loop is the default),
# `bench decode` and `bench mtp`, then the probe's A/B of the unmasked interior against all-masked blocks.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 230 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider -rf -x 2>&1 \
  | tee "$OUT/gpu-tests.log" | tail -4
B="python3 -m pagedmla.cli bench"
timeout 90 $B decode --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
timeout 60 $B mtp --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/mtp.json" > "$OUT/mtp.txt" 2>&1
P="python3 benchmarks/decode_probe.py --sweep"
timeout 70 $P --case 64,4096,128,1 --case 128,8192,128,1 --workers 64 --config 64,64,8,2 --config 64,64,8,2,masked \
  > "$OUT/ab.txt" 2>&1
timeout 50 $P --case 64,4096,16,1 --workers 128 --config 16,64,8,5 --config 16,64,8,5,masked >> "$OUT/ab.txt" 2>&1
grep -v "^\[" "$OUT/decode.txt" | tail -14; grep -v "^\[" "$OUT/mtp.txt" | tail -6
grep "B64\|B128" "$OUT/ab.txt" | grep -v "^|" | head -24
