#!/usr/bin/env bash
# One device call (edit per session). This one: batch 1 at 128 and 16 heads. Per-kernel times of the decode and the
# combine at several lengths (how much is fixed cost), combine tiles with more pieces per step, and worker counts.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
F="$OUT/b1-$COMMIT.txt"
timeout 200 python3 benchmarks/decode_probe.py --profile --case 1,16384,128,1 --case 1,16384,16,1 \
  --case 1,4096,128,1 --case 1,32768,128,1 \
  --combine 64,1,64,4 --combine 128,1,64,4 --combine 128,1,32,4 --combine 128,2,32,8 --combine 256,1,32,8 \
  --combine 128,1,128,8 --combine 256,1,64,8 > "$F" 2>&1
echo "probe rc $?"
timeout 150 python3 benchmarks/decode_probe.py --sweep --config 64,64,8,2,ws --workers 33,44,50,58,66,88 \
  --case 1,16384,128,1 >> "$F" 2>&1
echo "sweep rc $?"
grep -E "^#|W[0-9]|profile|^\|" "$F" | grep -v "^| ---\|_mla_decode_kernel:"
