#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 7: the 64-row kernel's partial tiles stored in
# four pipelined quarters (ws_start.py --quarters, A/B in one run), then its gpu tests with the quarters on.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-quarters-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,128 --combines shipped --quarters --repeat 3 > "$f" 2>&1
echo "quarters rc $?"; grep -v Warn "$f" | grep quarters | tail -18
f="$OUT/gpu-tests-ws-$COMMIT.txt"
PYTHONPATH=src timeout 240 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "warp_specialized or deepseek_shapes or cuda_graph_replay or waits_for or partitions" > "$f" 2>&1
echo "ws tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
