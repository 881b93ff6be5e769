#!/usr/bin/env bash
# One device call (edit per session). This one: the new dense ring kernel (kernels/mla_decode_ring.py): its gpu
# tests, then a probe of 16-head dense decode, ring against the Triton tiles at their worker counts.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf -x tests/test_decode_triton.py -k "ring" \
  > "$OUT/gpu-tests-ring-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-ring-$COMMIT.txt"; grep -E "^FAILED|Error|error" "$OUT/gpu-tests-ring-$COMMIT.txt" | head -20
timeout 300 python3 benchmarks/decode_probe.py --sweep --workers 128,256 \
  --case 64,4096,16,1 --case 128,4096,16,1 --case 128,8192,16,1 --case 16,4096,16,1 \
  --config 16,64,8,5,interior --config 16,32,4,1,ring2 > "$OUT/ring-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; cat "$OUT/ring-probe-$COMMIT.txt" | cut -c1-150
timeout 120 python3 benchmarks/decode_probe.py --sweep --workers 129,264 --case 1,16384,16,1 \
  --config 16,64,8,5,interior --config 16,32,4,1,ring2 > "$OUT/ring-probe-b1-$COMMIT.txt" 2>&1
echo "probe b1 rc $?"; grep -v "^#" "$OUT/ring-probe-b1-$COMMIT.txt" | cut -c1-150
timeout 120 python3 benchmarks/decode_probe.py --sweep --workers 128,256 --case 64,4096,16,1,fp8 \
  --case 128,4096,16,1,fp8 --config 16,32,4,4,prefetch --config 16,32,4,1,ring2 > "$OUT/ring-probe-fp8-$COMMIT.txt" 2>&1
echo "probe fp8 rc $?"; grep -v "^#" "$OUT/ring-probe-fp8-$COMMIT.txt" | cut -c1-150
