#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul with 4-warp 4-stage (and 3-stage) 128 x 128 tiles and tails
# split several ways, against the heuristic, at 1024-16384 rows (graph-timed probe).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 benchmarks/prefill_probe.py --only k_matmul --w4s4 --graph --json "$OUT/k_matmul-w4s4.json" \
  > "$OUT/k_matmul-w4s4-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-w4s4-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-200 | tail -22
