#!/usr/bin/env bash
# One device call (edit per session). This one: the demo on the GPU, then the 16-head split's worker count and
# tail cost on the final code.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 90 python3 -m pagedmla.cli demo --quiet > "$OUT/demo.log" 2>&1; echo "demo rc=$?"; tail -4 "$OUT/demo.log"
timeout 120 python3 benchmarks/decode_probe.py --sweep --workers 128,132 --tail-cost 0,2 \
  --config 16,64,8,5,interior --case 64,4096,16,1 --case 16,4096,16,1 > "$OUT/workers.txt" 2>&1
grep -E "^  B" "$OUT/workers.txt"
