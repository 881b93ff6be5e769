#!/usr/bin/env bash
# One device call (edit per session). This one: k_matmul at 4096 rows into 512 columns (whole 128 x 128 tiles) and
# into 576, the heuristic and 4-warp 4-stage tiles, graph-timed; then the Gluon warp-specialization smoke test.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/prefill_probe.py --only k_matmul --n512 --graph --json "$OUT/k_matmul-n512.json" \
  > "$OUT/k_matmul-n512-$COMMIT.txt" 2>&1
timeout 200 python3 benchmarks/experiments/gluon_ws_smoke.py > "$OUT/gluon-ws-smoke-$COMMIT.txt" 2>&1
grep -vE "^stress|^compiled" "$OUT/k_matmul-n512-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-200 | tail -9
cat "$OUT/gluon-ws-smoke-$COMMIT.txt"
