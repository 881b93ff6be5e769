#!/usr/bin/env bash
# One device call (edit per session). This one: the decode gpu tier (the warp-specialized kernel's tests first,
# 120 s cap: a hang stops the call), then the harness's decode and mtp suites.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k warp_specialized \
  > "$OUT/gpu-tests-decode-ws-$COMMIT.txt" 2>&1
rc=$?; tail -2 "$OUT/gpu-tests-decode-ws-$COMMIT.txt"
[ $rc -eq 124 ] && { echo "TIMEOUT (hang?)"; exit 1; }
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k "not warp_specialized" \
  > "$OUT/gpu-tests-decode-$COMMIT.txt" 2>&1
echo "decode tier rc $?"; tail -2 "$OUT/gpu-tests-decode-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-decode-$COMMIT.txt" | head
for suite in decode mtp; do
  timeout 150 python3 -m pagedmla.cli bench $suite --no-reference --commit "$COMMIT" --json "$OUT/bench-$suite-$COMMIT.json" \
    > "$OUT/bench-$suite-$COMMIT.txt" 2>"$OUT/bench-$suite-$COMMIT.stderr"
  echo "bench $suite rc $?"; cat "$OUT/bench-$suite-$COMMIT.txt" | tail -22
done
