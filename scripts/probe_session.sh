#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row warp-specialized FP8 decode (`kernels.mla_decode_ws16`)
# with its widening done three ways (WS16_WIDEN_MODE: 0 the exact conversion, 1 the native e4m3 -> f16 cvt, 2 a
# shift per value; 1 and 2 are timing probes with wrong values): the per-chunk timeline and whole calls.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for mode in 0 1 2; do
  for warps in 4 8; do
    echo "== widen_mode $mode widen_warps $warps"
    PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 --set WIDEN_MODE=$mode \
      --set WIDEN_WARPS=$warps > "$OUT/t.txt" 2>&1
    echo "rc $?"; grep "phases" "$OUT/t.txt" | tr "," "\n" | grep -E "period|convert|widen_busy" | tr "\n" " "; echo
    cat "$OUT/t.txt" >> "$OUT/ws16-timeline-modes-$COMMIT.txt"
  done
done
rm -f "$OUT/t.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 \
  --variant widen_mode=0 --variant widen_mode=1 --variant widen_mode=2 --variant widen_mode=1,widen_warps=8 \
  --variant widen_mode=2,widen_warps=8 > "$OUT/ws16-variants-$COMMIT.txt" 2>&1
echo "variants rc $?"
cat "$OUT/ws16-variants-$COMMIT.txt" | cut -c1-150
