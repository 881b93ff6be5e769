#!/usr/bin/env bash
# One device call (edit per session). This one: FP8 (rope-aware row) dense decode at 16 heads, the heuristic's
# 8-warp 64-key tile against 4-warp tiles that fit two programs per SM, at the default worker count, half and
# twice it, across batch shapes.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
F8="--config 16,64,8,3,prefetch --config 16,32,4,3,prefetch --config 16,32,4,4,prefetch"
timeout 400 python3 benchmarks/decode_probe.py --sweep --case 1,16384,16,1,fp8 --case 16,4096,16,1,fp8 \
  --case 64,4096,16,1,fp8 --case 128,4096,16,1,fp8 --case 128,8192,16,1,fp8 --case 32,32768,16,1,fp8 \
  $F8 > "$OUT/fp8-two-per-sm.txt" 2>&1
grep -E "^#|TB/s|failed|Error" "$OUT/fp8-two-per-sm.txt" | grep -v "^# _mla" | sed 's/ TFLOP.*err/ err/' | cut -c1-120
