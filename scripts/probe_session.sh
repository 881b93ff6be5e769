#!/usr/bin/env bash
# One device call (edit per session). This one: does Triton's Hopper warp specialization run (one process per
# case, with a timeout: the first try hung)? If the k_matmul case runs: the k_matmul WS sweep and the cache-write
# gpu tests. Then the random-gather read ceiling probe.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/experiments/ws_smoke.py > "$OUT/ws-smoke-$COMMIT.txt" 2>&1
cat "$OUT/ws-smoke-$COMMIT.txt"
if grep -qE "^kmatmul: max err [0-9]" "$OUT/ws-smoke-$COMMIT.txt"; then
  timeout 150 python3 benchmarks/prefill_probe.py --only k_matmul --ws --graph --json "$OUT/k_matmul-ws.json" \
    > "$OUT/k_matmul-ws-$COMMIT.txt" 2>&1
  grep -vE "^compiled" "$OUT/k_matmul-ws-$COMMIT.txt" \
    | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-250 | tail -16
  timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests.txt" 2>&1
  tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
fi
timeout 60 python3 benchmarks/gather_probe.py > "$OUT/gather-$COMMIT.txt" 2>&1
cut -c1-150 "$OUT/gather-$COMMIT.txt" | tail -22
