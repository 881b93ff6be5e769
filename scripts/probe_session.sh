#!/usr/bin/env bash
# One device call (edit per session). This one: the two-partition Gluon prefill (no serialized MMAs): its gpu
# tests (90 s cap: a hang stops the call), the prefill tier, then the harness's prefill suite.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 90 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py -k warp_specialized \
  > "$OUT/gpu-tests-prefill-ws-$COMMIT.txt" 2>&1
rc=$?; tail -2 "$OUT/gpu-tests-prefill-ws-$COMMIT.txt"
[ $rc -eq 0 ] || { grep -E "Error|assert|TIMEOUT" "$OUT/gpu-tests-prefill-ws-$COMMIT.txt" | head; exit 1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py -k "not warp_specialized" \
  > "$OUT/gpu-tests-prefill-$COMMIT.txt" 2>&1
echo "prefill tier rc $?"; tail -2 "$OUT/gpu-tests-prefill-$COMMIT.txt"
timeout 200 python3 -m pagedmla.cli bench prefill --no-reference --commit "$COMMIT" --json "$OUT/bench-prefill-$COMMIT.json" \
  > "$OUT/bench-prefill-$COMMIT.txt" 2>"$OUT/bench-prefill-$COMMIT.stderr"
echo "bench rc $?"; tail -12 "$OUT/bench-prefill-$COMMIT.txt"
