#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 3: the decode kernels letting the combine launch
# at their last piece (rs_ablate.py trigger-end / trigger-last at 16 heads FP8; ws_start.py --trigger at 128
# heads, with START 0 and 1).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/rs-ablate-trigger-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/rs_ablate.py --case 64,4096 --case 128,4096 \
  --only base,trigger-end,trigger-last --repeat 3 > "$f" 2>&1
echo "ablate rc $?"; grep -v Warn "$f" | tail -20
f="$OUT/ws-trigger-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 240 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,128 --starts 0 1 --combines shipped --trigger --repeat 2 > "$f" 2>&1
echo "ws rc $?"; grep -v Warn "$f" | tail -24
