#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul with the tail tile's K pieces inside the main programs'
# pass over K (tail_in_main), 4 warps, 4-5 stages, against the heuristic (stream-K from 16384) at 3072-32768 rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 benchmarks/prefill_probe.py --only k_matmul --w4s4 --graph --json "$OUT/k_matmul-w4s4.json" \
  > "$OUT/k_matmul-w4s4-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-w4s4-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-200 | tail -22
