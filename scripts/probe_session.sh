#!/usr/bin/env bash
# One device call (edit per session). This one, after review fixes: the Gluon decode's and prefill's gpu tests
# (120 s cap: a hang stops the call), the CUDA-graph replay at 128 heads, then the harness's 128-head decode.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py tests/test_prefill_triton.py \
  -k "warp_specialized or graph_replay" > "$OUT/gpu-tests-ws-$COMMIT.txt" 2>&1
rc=$?; tail -2 "$OUT/gpu-tests-ws-$COMMIT.txt"
[ $rc -eq 124 ] && { echo "TIMEOUT (hang?)"; exit 1; }
grep -E "^FAILED" "$OUT/gpu-tests-ws-$COMMIT.txt" | head
timeout 100 python3 -m pagedmla.cli bench decode --heads 128 --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-decode-h128-$COMMIT.json" > "$OUT/bench-decode-h128-$COMMIT.txt" 2>"$OUT/bench-decode-h128-$COMMIT.stderr"
echo "bench rc $?"; tail -8 "$OUT/bench-decode-h128-$COMMIT.txt"
