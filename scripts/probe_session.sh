#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse warp-specialized kernel widening 128 columns at a time,
# each part followed by its MMA (the rope MMA first), against ccb6acc (halves). Before: issuing the rope MMA before
# widening the latent and the first latent half's MMA while the second half is widened: its gpu tests, then
# the harness's FP8 sparse rows at 64 and 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "ws or gluon" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -20
timeout 100 python3 -m pagedmla.cli bench sparse --heads 128 64 --batch 64 128 --keys 32768 \
  --kv-dtype fp8 --no-reference --commit "$COMMIT" --json "$OUT/bench-sparse-fp8-$COMMIT.json" \
  > "$OUT/bench-sparse-fp8-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^sparse|ceiling" "$OUT/bench-sparse-fp8-$COMMIT.txt" | cut -c1-120
