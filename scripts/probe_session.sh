#!/usr/bin/env bash
# One device call (edit per session). This one: the dense and sparse wait tests after the fixture compares bytes,
# and the sparse CUDA-graph and dispatch tests.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  tests/test_decode_triton.py -k "waits_for or graph or sparse_ring_configs or sparse_ws_splits" \
  > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
