#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized 16-row decode over the rope-aware FP8 cache
# (`kernels.mla_decode_ws16`, taken only with its config): its gpu tests, its per-block timeline
# (benchmarks/experiments/ws16_timeline.py) and its variants against the shipped path (ws16_variants.py).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ws16" -x > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
rc=$?
echo "tests rc $rc"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
PYTHONPATH=src timeout 120 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 \
  --json "$OUT/ws16-timeline-$COMMIT.json" > "$OUT/ws16-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"; grep -v "^  w[0-3]_" "$OUT/ws16-timeline-$COMMIT.txt" | tr "," "\n" | head -80
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 --case 128,4096 \
  --variant widen_warps=4 --variant widen_warps=8 > "$OUT/ws16-variants-$COMMIT.txt" 2>&1
echo "variants rc $?"
cat "$OUT/ws16-variants-$COMMIT.txt" | cut -c1-150
