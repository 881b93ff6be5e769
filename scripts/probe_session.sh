#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse FP8 64-row tiles at 2 stages (the heuristic since
# 056ed76, measured on the rope-aware cache with a bf16 q) against 3 stages for the other FP8 layouts: a
# 64-column-group FP8 cache with a bf16 q, and the rope-aware cache with an FP8 q.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/sparse_probe.py --out "$OUT" --sweep --cases H128-fp8g64kv-bf16q,H128-rope-fp8kv-fp8q \
  --batch 64 --tokens 8192 --budget-s 150 > "$OUT/sparse-fp8-stages.txt" 2>&1
grep -vE "^\{" "$OUT/sparse-fp8-stages.txt" | cut -c1-130 | tail -14
