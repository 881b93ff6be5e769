#!/usr/bin/env bash
# One device call (edit per session). This one: after the launch keywords moved into one helper, the test of the
# decode kernels waiting for the kernel before them and the graph replays.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "waits_for or cuda_graph" > "$OUT/gpu-tests-helper-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-helper-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-helper-$COMMIT.txt" | head
