#!/usr/bin/env bash
# One device call (edit per session). This one: 16-head dense decode with two programs per SM (4-warp tiles, or
# 8 warps capped at 128 registers) against the one-program default, bf16 and FP8, at the default and twice the
# default worker count.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
BF="--config 16,64,8,5,interior --config 16,32,4,3,interior --config 16,32,4,5,interior --config 16,64,4,2,interior --config 16,32,8,3,interior,r128"
timeout 280 python3 benchmarks/decode_probe.py --sweep --case 64,4096,16,1 --case 128,4096,16,1 --case 1,16384,16,1 \
  $BF --workers 132,264 > "$OUT/bf16.txt" 2>&1
F8="--config 16,64,8,3,prefetch --config 16,32,4,2,prefetch --config 16,32,4,3,prefetch --config 16,64,4,2,prefetch --config 16,32,8,3,prefetch,r128"
timeout 200 python3 benchmarks/decode_probe.py --sweep --case 64,4096,16,1,fp8 --case 128,4096,16,1,fp8 \
  $F8 --workers 132,264 > "$OUT/fp8.txt" 2>&1
grep -E "^#|TB/s|failed|Error" "$OUT/bf16.txt" "$OUT/fp8.txt" | sed 's/^.*txt://' | cut -c1-150
