#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse gpu tier again (the ring's CUDA-graph replay without a
# plan), then a diagnostic of the ring kernel (benchmarks/ring_diag.py, a temporary knob: copies that read
# nothing, math skipped, both).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 200 python3 benchmarks/ring_diag.py > "$OUT/ring-diag-$COMMIT.txt" 2>&1
echo "diag rc $?"; cat "$OUT/ring-diag-$COMMIT.txt" | tail -34
