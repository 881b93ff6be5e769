#!/usr/bin/env bash
# One device call (edit per session). This one: what bounds the 16-row FP8 kernel (ws16_ablate.py: partitions'
# work taken out) at B64 and B128 N4096, and B1 N16384.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ablate-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 240 python3 benchmarks/experiments/ws16_ablate.py --case 64,4096 \
  --case 128,4096 --repeat 2 > "$f" 2>&1
echo "ablate rc $?"; cat "$f" | tail -30
