#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul main tiles with 128-wide K steps (2 and 3 stages) and 4
# stages of 64, against the heuristic's, in the graph-timed sweep.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/prefill_probe.py --only k_matmul --sweep --graph > "$OUT/k_matmul.txt" 2>&1
grep -E "^k_matmul 4096|FAILED|Error" "$OUT/k_matmul.txt" | sed -E 's/MatmulToCacheConfig//; s/block_|num_|group_//g' | cut -c1-190
