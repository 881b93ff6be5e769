#!/usr/bin/env bash
# One device call (edit per session). This one: the Gluon sparse decode's gpu tests (150 s cap: a hang stops the
# call), then the harness's sparse suite.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "warp_specialized or v32_shapes" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
rc=$?; tail -2 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"
[ $rc -eq 124 ] && { echo "TIMEOUT (hang?)"; exit 1; }
grep -E "^FAILED|Error|assert" "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -8
timeout 120 python3 -m pagedmla.cli bench sparse --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-sparse-$COMMIT.json" > "$OUT/bench-sparse-$COMMIT.txt" 2>"$OUT/bench-sparse-$COMMIT.stderr"
echo "bench rc $?"; tail -10 "$OUT/bench-sparse-$COMMIT.txt"
