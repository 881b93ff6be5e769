#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row warp-specialized FP8 decode (`kernels.mla_decode_ws16`)
# with its widening done three ways (WS16_WIDEN_MODE: 0 the exact conversion, 1 the native e4m3 -> f16 cvt, 2 a
# shift per value; 1 and 2 are timing probes with wrong values): the per-chunk timeline and whole calls.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for mode in 0 1; do
  for warps in 4 8; do
    echo "== widen_mode $mode widen_warps $warps"
    PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 --set WIDEN_MODE=$mode \
      --set WIDEN_WARPS=$warps > "$OUT/t.txt" 2>&1
    echo "rc $?"; grep "phases" "$OUT/t.txt" | tr "," "\n" | tr "\n" " "; echo
    cat "$OUT/t.txt" >> "$OUT/ws16-timeline-modes-$COMMIT.txt"
  done
done
rm -f "$OUT/t.txt"
