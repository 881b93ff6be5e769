#!/usr/bin/env bash
# One device call (edit per session). This one: the ring kernel's worker count at 16 heads (B64 / B128 N4096,
# bf16 and FP8: 192 / 256 / 264 / 320 workers), then per-kernel device times of B64 N4096 16 heads and B1 N16384
# 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/decode_probe.py --sweep --ring-plan --config 16,32,4,1,ring2 \
  --workers 192,256,264,320 --case 64,4096,16,1 --case 128,4096,16,1 --case 64,4096,16,1,fp8 \
  > "$OUT/ring-workers-$COMMIT.txt" 2>&1
echo "sweep rc $?"; tail -40 "$OUT/ring-workers-$COMMIT.txt" | cut -c1-150
timeout 120 python3 benchmarks/decode_probe.py --profile --ring-plan --case 64,4096,16,1 --case 1,16384,128,1 \
  > "$OUT/profile-$COMMIT.txt" 2>&1
echo "profile rc $?"; tail -30 "$OUT/profile-$COMMIT.txt" | cut -c1-150
