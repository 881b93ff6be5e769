#!/usr/bin/env bash
# One device call (edit per session). This one: combine tiles with fewer warps for schedules of many pieces per
# sequence (batch 1: 128 heads N16384 / N4096, 16 heads N16384), torch.profiler device times.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
many=""; for c in 128,1,64,4 128,1,32,2 128,1,64,2 128,1,16,1 128,1,32,1 128,2,16,2 64,1,32,2 256,1,16,2 \
  256,1,32,4 128,1,128,4; do many="$many --combine $c"; done
timeout 250 python3 benchmarks/decode_probe.py --profile --case 1,16384,128,1 --case 1,4096,128,1 \
  --case 1,16384,16,1 --case 1,32768,128,1 $many > "$OUT/combine-b1-$COMMIT.txt" 2>&1
echo "rc $?"; grep -E "profile|default:" "$OUT/combine-b1-$COMMIT.txt" | cut -c1-120
