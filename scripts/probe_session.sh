#!/usr/bin/env bash
# One device call (edit per session). This one: the Gluon sparse decode with copies issued a pair ahead (32-key
# blocks, 4-slot ring, in-place widening). Its gpu tests and the sparse tier (150 s cap: a hang stops the call),
# then the harness's sparse suite.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/test_sparse_decode_triton.py \
  -k "warp_specialized" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
rc=$?; echo "ws tests rc $rc"; tail -3 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"; grep -E "^FAILED|Error|error" "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -8
if [ $rc -eq 0 ]; then
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
    -k "not warp_specialized" > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
  echo "sparse tier rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head
  timeout 150 python3 -m pagedmla.cli bench sparse --no-reference --commit "$COMMIT" \
    --json "$OUT/bench-sparse-$COMMIT.json" > "$OUT/bench-sparse-$COMMIT.txt" 2>"$OUT/bench-sparse-$COMMIT.stderr"
  echo "bench rc $?"; tail -12 "$OUT/bench-sparse-$COMMIT.txt"
fi
