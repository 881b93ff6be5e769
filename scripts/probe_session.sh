#!/usr/bin/env bash
# One device call (edit per session). This one: the Gluon ring kernel for the 16-head sparse decode: its gpu
# tests and the rest of the sparse tier (index ring in shared memory, constexpr page size), then benchmarks/sparse_probe.py's
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 240 python3 benchmarks/sparse_probe.py --out "$OUT" --cases H16-bf16kv --sweep > "$OUT/sparse-ring-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^{" "$OUT/sparse-ring-$COMMIT.txt" | tail -30
