#!/usr/bin/env bash
# One device call (edit per session). This one: the Gluon ring kernel as the 16-head sparse default (2 slots, two
# programs per SM): the whole sparse gpu tier (with the ring's CUDA-graph replay), then the harness's 16-head
# bf16 sparse cases (B64 and B128) and the 128/64-head FP8 ones (kernels unchanged, for the same-run table).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 120 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-$COMMIT.json" > "$OUT/bench-sparse-h16-$COMMIT.txt" 2>&1
echo "bench h16 rc $?"; grep -E "^ceilings|^sparse|copy|matmul" "$OUT/bench-sparse-h16-$COMMIT.txt" | cut -c1-160 | tail -8
timeout 150 python3 -m pagedmla.cli bench sparse --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-sparse-$COMMIT.json" > "$OUT/bench-sparse-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^sparse" "$OUT/bench-sparse-$COMMIT.txt" | cut -c1-160 | tail -8
