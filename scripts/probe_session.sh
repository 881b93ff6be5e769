#!/usr/bin/env bash
# One device call (edit per session). This one: stream-K k_matmul (groups of three 128 + 64 column tiles, 4
# stages) against the heuristic's tiles at 4096, 8192 and 16384 rows, each timed twice, alternating.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 benchmarks/prefill_probe.py --only k_matmul --stream --graph --json "$OUT/k_matmul-stream.json" \
  > "$OUT/k_matmul-stream-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-stream-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=(128|64), block_n=128, block_k=64, group_m=8, /cfg(m=\1 /" | cut -c1-250 | tail -16
