#!/usr/bin/env bash
# One device call (edit per session). This one: the two-partition seesaw decode (consumer 0 issues the copies)'s gpu tests (120 s cap: a hang
# stops the call), then decode_probe timing it against the Triton kernel at the 128-head target shapes.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k warp_specialized \
  > "$OUT/gpu-tests-decode-ws-$COMMIT.txt" 2>&1
rc=$?; tail -3 "$OUT/gpu-tests-decode-ws-$COMMIT.txt"
[ $rc -eq 124 ] && { echo "TIMEOUT (hang?)"; exit 1; }
[ $rc -eq 0 ] || grep -E "Error|assert|mismatch|Mismatch" "$OUT/gpu-tests-decode-ws-$COMMIT.txt" | head -20
timeout 300 python3 benchmarks/decode_probe.py --sweep --config 64,64,8,2,ws --workers none \
  --case 64,4096,128,1 --case 128,4096,128,1 --case 128,8192,128,1 --case 1,16384,128,1 --case 64,4096,128,2 \
  --case 64,4096,128,4 --json "$OUT/decode-ws-$COMMIT.json" > "$OUT/decode-ws-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|failed" "$OUT/decode-ws-$COMMIT.txt" | head; tail -8 "$OUT/decode-ws-$COMMIT.txt"
