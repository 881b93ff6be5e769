#!/usr/bin/env bash
# One device call (edit per session). This one: the final ring kernel at small batches (B1 N16384, B16 / B32
# N4096, 16 heads), planned as for a big batch, against the Triton tile at its own worker counts.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/decode_probe.py --ring-plan --sweep --workers 129,128 --case 1,16384,16,1 \
  --case 16,4096,16,1 --case 32,4096,16,1 --config 16,64,8,5,interior --config 16,32,4,1,ring2 \
  > "$OUT/ring-small-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^#" "$OUT/ring-small-$COMMIT.txt" | grep -v "^|" | grep -v Warn | cut -c1-150
