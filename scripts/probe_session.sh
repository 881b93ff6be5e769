#!/usr/bin/env bash
# One device call (edit per session). This one: the two ring kernels on the same rows (in order / shuffled),
# then the 16-head B64 probe with the plan's exact spans (ring at 256 workers, Triton at 128).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/experiments/ring_pattern_ab.py > "$OUT/ring-ab-$COMMIT.txt" 2>&1
echo "ab rc $?"; cat "$OUT/ring-ab-$COMMIT.txt" | tail -8
timeout 200 python3 benchmarks/decode_probe.py --sweep --workers 128,256 --case 64,4096,16,1 --case 128,4096,16,1 \
  --config 16,64,8,5,interior --config 16,32,4,1,ring2 > "$OUT/ring-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^#" "$OUT/ring-probe-$COMMIT.txt" | cut -c1-150 | head -12
