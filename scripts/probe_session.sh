#!/usr/bin/env bash
# One device call (edit per session). This one: the dense ring with one scalar page per block (copies issue
# early): A/B against the sparse ring on the same rows, its gpu tests, the 16-head probe.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/experiments/ring_pattern_ab.py > "$OUT/ring-ab-page-$COMMIT.txt" 2>&1
echo "ab rc $?"; cat "$OUT/ring-ab-page-$COMMIT.txt" | tail -9
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/test_decode_triton.py -k "ring" \
  > "$OUT/gpu-tests-ring-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-ring-$COMMIT.txt"; grep -E "^FAILED|Error|error" "$OUT/gpu-tests-ring-$COMMIT.txt" | head -20
timeout 200 python3 benchmarks/decode_probe.py --sweep --workers 128,256 --case 64,4096,16,1 --case 128,4096,16,1 \
  --case 64,4096,16,1,fp8 --config 16,64,8,5,interior --config 16,32,4,4,prefetch --config 16,32,4,1,ring2 \
  > "$OUT/ring-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^#" "$OUT/ring-probe-$COMMIT.txt" | grep -v "^|" | cut -c1-150
