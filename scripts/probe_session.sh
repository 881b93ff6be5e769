#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized 16-row decode over the rope-aware FP8 cache
# (`kernels.mla_decode_ws16`, taken only with its config): its gpu tests, then decode_probe's sweep of it
# against the shipped config (the default plan and 132 workers), with the bf16 decode for the ratio.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ws16" -x > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
rc=$?
echo "tests rc $rc"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
PYTHONPATH=src timeout 200 python3 benchmarks/decode_probe.py --sweep --config 16,64,4,1,ws16 --workers 132 \
  --case 64,4096,16,1,fp8 --case 128,4096,16,1,fp8 --case 64,4096,16,1 --case 1,16384,16,1,fp8 \
  --json "$OUT/ws16-probe-$COMMIT.json" > "$OUT/ws16-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"
grep -E "^#|  B" "$OUT/ws16-probe-$COMMIT.txt" | cut -c1-160 | head -30
