#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse decode's index range prefetched to L1 before the key
# loop (`SparseDecodeConfig.l1_indices`): its gpu tests, then sparse_probe's heuristic tiles without and with it,
# alternating (16 heads bf16, with and without fold; 128 heads rope-aware FP8).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py -k "l1" \
  > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests.txt" | head -10
timeout 200 python3 benchmarks/sparse_probe.py --out "$OUT" --sweep --l1 --cases H16-bf16kv,H128-rope-fp8kv-bf16q \
  --batch 64 --tokens 8192 --budget-s 120 > "$OUT/sparse-l1.txt" 2>&1
grep -vE "^\{" "$OUT/sparse-l1.txt" | cut -c1-130 | tail -14
