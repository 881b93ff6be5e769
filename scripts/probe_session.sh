#!/usr/bin/env bash
# One device call (edit per session). This one: the plan's fixed cost split between a sequence's start and end
# (DecodePlanConfig.tail_cost) against all of it up front, and the 16-head kernel's fixed cost at tiny N.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu tests/test_decode_triton.py -k "partitions or (deepseek and H16)" \
  -p no:cacheprovider 2>&1 | tail -2
P="python3 benchmarks/decode_probe.py"
timeout 120 $P --sweep --tail-cost 0,1 --workers 128 --config 16,64,8,5,interior --case 64,4096,16,1 \
  --case 64,2048,16,1 --case 16,4096,16,1 --case 1,16384,16,1 --case 32,32768,16,1 > "$OUT/tail16.txt" 2>&1
grep -E "^  B" "$OUT/tail16.txt"
timeout 80 $P --sweep --tail-cost 0,1 --workers 64 --config 64,64,8,2,interior --case 16,4096,128,1 \
  --case 1,16384,128,1 > "$OUT/tail128.txt" 2>&1
grep -E "^  B" "$OUT/tail128.txt"
timeout 80 $P --profile --case 128,64,16,1 --case 128,256,16,1 --case 128,1024,16,1 --case 64,4096,16,1 \
  > "$OUT/tiny.txt" 2>&1
grep -E "profile" "$OUT/tiny.txt"
