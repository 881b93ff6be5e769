#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul at 4096 rows, the heuristic's 128 x 128 tiles at 8
# warps against 4 warps, alternating three times (graph-timed probe).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/prefill_probe.py --only k_matmul --warps4 --graph --json "$OUT/k_matmul-warps4.json" \
  > "$OUT/k_matmul-warps4-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-warps4-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-200 | tail -9
