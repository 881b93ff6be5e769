#!/usr/bin/env bash
# One device call (edit per session). This one: the CUDA-graph replay test shared by both Gluon sparse kernels
# (the ring kernel's and the warp-specialized kernel's tests merged into one).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "cuda_graph_replay" > "$OUT/gpu-tests-sparse-graph-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-graph-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-sparse-graph-$COMMIT.txt" | head -20
