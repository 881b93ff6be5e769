#!/usr/bin/env bash
# One device call (edit per session). This one: what bounds the copies of the 16-row warp-specialized FP8 decode
# (`kernels.mla_decode_ws16`): whole calls with parts of the copies left out (WS16_PROBE: 1 scales, 2 rope,
# 4 latent; wrong values), and the timeline without the scale copies.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 \
  --variant probe=0 --variant probe=1 --variant probe=2 --variant probe=3 --variant probe=4 --variant probe=6 \
  --variant probe=7 > "$OUT/ws16-probes-$COMMIT.txt" 2>&1
echo "variants rc $?"
cat "$OUT/ws16-probes-$COMMIT.txt" | cut -c1-150
for probe in 1 7; do
PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 --set PROBE=$probe \
  > "$OUT/t.txt" 2>&1
echo "timeline probe $probe rc $?"; grep phases "$OUT/t.txt" | tr "," "\n" | tr "\n" " "; echo
cat "$OUT/t.txt" >> "$OUT/ws16-timeline-probes-$COMMIT.txt"
done
rm -f "$OUT/t.txt"
