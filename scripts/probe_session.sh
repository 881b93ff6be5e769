#!/usr/bin/env bash
# One device call (edit per session). This one: with the logits' MMA split across warpgroups, do the 64-row
# tiles still want the same key blocks and stages? decode_probe at 128 heads (bf16; B64/B128 N4096, B1 N16384,
# MTP q2) and sparse_probe's 128-head rope-aware FP8 case, each over its config list.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
C="--config 64,64,8,2,interior --config 64,32,8,5,interior --config 64,32,8,4,interior --config 64,32,8,3,interior"
timeout 200 python3 benchmarks/decode_probe.py --sweep --case 64,4096,128,1 --case 128,4096,128,1 --case 1,16384,128,1 \
  --case 64,4096,128,2 $C --workers 66 > "$OUT/h128-configs.txt" 2>&1
timeout 150 python3 benchmarks/sparse_probe.py --out "$OUT" --sweep --cases H128-rope-fp8kv-bf16q --batch 64 \
  --tokens 8192 > "$OUT/sparse-configs.txt" 2>&1
grep -E "^#|TB/s|failed|Error" "$OUT/h128-configs.txt" | grep -v "^# _mla" | sed 's/ TB\/s.*TFLOP\/s/ TB\/s/' | cut -c1-110
grep -E "H128|case" "$OUT/sparse-configs.txt" | cut -c1-130 | head -12
