#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul with 128 x (128 + 16) column tiles (576 = 4 x 144) over
# spans of whole row tiles (128 workers) or stream-K (132), against the heuristic, alternating (graph-timed).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 benchmarks/prefill_probe.py --only k_matmul --wide --graph --json "$OUT/k_matmul-wide.json" \
  > "$OUT/k_matmul-wide-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-wide-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-220 | tail -22
