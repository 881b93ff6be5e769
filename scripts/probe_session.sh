#!/usr/bin/env bash
# One device call (edit per session). This one: the dense and sparse wait tests after the fixture compares bytes,
# the sparse CUDA-graph and config tests, then the sparse wait tests on a copy without the waits.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  tests/test_decode_triton.py -k "waits_for or graph or sparse_ring_configs or sparse_ws_splits" \
  > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
# the same wait tests on a copy whose sparse decode kernels do not wait (ab_mut/): they should fail
PYTHONPATH=ab_mut/src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_sparse_decode_triton.py \
  -k "waits_for" > "$OUT/gpu-tests-mutant-$COMMIT.txt" 2>&1
echo "mutant tests rc $? (expected to fail)"; tail -1 "$OUT/gpu-tests-mutant-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-mutant-$COMMIT.txt" | head -12
