#!/usr/bin/env bash
# One device call (edit per session). This one, the final code: the cache-write gpu tier (stream-K configs and
# the heuristic's stream-K at 16384 rows), the harness's cache-write suite at 4096 and 16384 rows, and the
# 128-head sparse configs again (2 against 3 stages, one earlier run favoured 2).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 120 python3 -m pagedmla.cli bench cache-write --batch 1 --keys 4096 16384 --no-reference \
  --json "$OUT/bench-cache-write.json" > "$OUT/bench-cache-write.txt" 2>&1
timeout 150 python3 benchmarks/sparse_probe.py --out "$OUT" --sweep --cases H128-rope-fp8kv-bf16q --batch 64 \
  --tokens 8192 --budget-s 40 > "$OUT/sparse-configs.txt" 2>&1
grep -E "^ceilings|^cache-write" "$OUT/bench-cache-write.txt" | cut -c1-130
grep -E "H128|case" "$OUT/sparse-configs.txt" | grep -v "^{" | cut -c1-130 | head -12
