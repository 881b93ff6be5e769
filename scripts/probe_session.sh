#!/usr/bin/env bash
# One device call (edit per session). This one, after removing unused arguments of the Gluon decode kernel: its
# gpu tests and the CUDA-graph replays (120 s cap: a hang stops the call).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "warp_specialized or graph_replay" > "$OUT/gpu-tests-decode-ws-$COMMIT.txt" 2>&1
echo "rc $?"; tail -2 "$OUT/gpu-tests-decode-ws-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-decode-ws-$COMMIT.txt" | head
