#!/usr/bin/env bash
# One device call (edit per session). This one: stream-K k_matmul in groups of three 128 + 64 column tiles: the
# cache-write gpu tests, then the k_matmul stream sweep (graph-timed) with the adversarial-cache checks.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 240 python3 benchmarks/prefill_probe.py --only k_matmul --stream --graph --stress --json "$OUT/k_matmul-stream.json" \
  > "$OUT/k_matmul-stream-$COMMIT.txt" 2>&1
grep -E "FAILED|stress.*stream=132" "$OUT/k_matmul-stream-$COMMIT.txt" | cut -c1-170 | head -12
grep -vE "^stress|^compiled" "$OUT/k_matmul-stream-$COMMIT.txt" \
  | sed -E "s/MatmulToCacheConfig\(block_m=(128|64), block_n=128, block_k=64, group_m=8, /cfg(m=\1 /" | cut -c1-250 | tail -16
