#!/usr/bin/env bash
# One device call (edit per session). This one: the RMS norm of the new K rows on a 1-D grid (was batch on grid y):
# the cache-write gpu tier, and the Gluon sparse dispatch tests after the float32-scales check.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py \
  > "$OUT/gpu-tests-cache-write-$COMMIT.txt" 2>&1
echo "cache-write tests rc $?"; tail -1 "$OUT/gpu-tests-cache-write-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-cache-write-$COMMIT.txt" | head
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "H16-rope or H64-ps64 or ring_configs and split1" > "$OUT/gpu-tests-sparse-dispatch-$COMMIT.txt" 2>&1
echo "sparse tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-dispatch-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-sparse-dispatch-$COMMIT.txt" | head
