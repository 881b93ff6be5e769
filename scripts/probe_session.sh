#!/usr/bin/env bash
# One device call (edit per session). This one: the combine's 128-piece tile for batch 1. Decode gpu tests that
# split sequences into many pieces (120 s cap), then batch 1 at 128 and 16 heads over worker counts, with
# per-kernel times.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "partitions or graph_replay or H16-ps64-q1 or H128-ps128" > "$OUT/gpu-tests-combine-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-combine-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-combine-$COMMIT.txt" | head
F="$OUT/b1-workers-$COMMIT.txt"
timeout 150 python3 benchmarks/decode_probe.py --sweep --profile --config 64,64,8,2,ws --workers 44,52,58,66 \
  --case 1,16384,128,1 --case 1,32768,128,1 > "$F" 2>&1
echo "probe rc $?"
timeout 100 python3 benchmarks/decode_probe.py --sweep --profile --config 16,64,8,5,interior --workers 66,96,129 \
  --case 1,16384,16,1 >> "$F" 2>&1
echo "probe rc $?"
grep -E "^#|W[0-9]+ \(|profile|^\|" "$F" | grep -v "^| ---\|_mla_decode_kernel:"
