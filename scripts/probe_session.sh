#!/usr/bin/env bash
# One device call (edit per session). This one: exact worker spans in the plan and the skipped empty masked
# loops of 16/32-row tiles: decode gpu tests, then 16-head cases with the interior loop on and off.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu tests/test_decode_triton.py -k "partitions or graph or H16 or variants" \
  -p no:cacheprovider 2>&1 | tail -2
P="python3 benchmarks/decode_probe.py"
timeout 150 $P --sweep --workers 128 --config 16,64,8,5,interior --config 16,64,8,5 --case 64,4096,16,1 \
  --case 16,4096,16,1 --case 1,16384,16,1 --case 128,4096,16,1 --case 64,4096,16,2 > "$OUT/h16.txt" 2>&1
grep -E "^  B" "$OUT/h16.txt"
timeout 80 $P --profile --case 16,4096,128,1 --case 1,16384,128,1 --case 64,4096,128,1 --case 16,4096,16,1 \
  > "$OUT/h128.txt" 2>&1
grep -E "profile|^\| [0-9]" "$OUT/h128.txt"
