#!/usr/bin/env bash
# One device call (edit per session). This one: warp-specialized k_matmul main tiles (gpu tests of the cache
# writes, the k_matmul WS sweep with adversarial-cache checks), and the random-gather read ceiling probe.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 200 python3 benchmarks/prefill_probe.py --only k_matmul --ws --graph --stress --json "$OUT/k_matmul-ws.json" \
  > "$OUT/k_matmul-ws-$COMMIT.txt" 2>&1
grep -E "FAILED|stress.*ws=True" "$OUT/k_matmul-ws-$COMMIT.txt" | cut -c1-160 | head -12
timeout 90 python3 benchmarks/gather_probe.py > "$OUT/gather-$COMMIT.txt" 2>&1
tail -3 "$OUT/k_matmul-ws-$COMMIT.txt" >/dev/null
grep -vE "^stress|^compiled" "$OUT/k_matmul-ws-$COMMIT.txt" | sed -E "s/MatmulToCacheConfig\(block_m=128, block_n=128, block_k=64, group_m=8, /cfg(/" | cut -c1-260 | tail -25
cat "$OUT/gather-$COMMIT.txt" | cut -c1-150 | tail -22
