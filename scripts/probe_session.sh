#!/usr/bin/env bash
# One device call (edit per session). This one: split sequences merged inside the 16-row ring kernel by their
# last piece (`DecodeConfig.ring_merge`) against the combine kernel: its gpu tests, then decode_probe A/B of the
# two configs in one process at 16 heads (bf16 and the rope-aware FP8 row).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring_merge or ring_depths or ring_cuda_graph or ring_plan" > "$OUT/gpu-tests-ring-merge-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-ring-merge-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-ring-merge-$COMMIT.txt" | head -20
timeout 300 python3 benchmarks/decode_probe.py --sweep --ring-plan --workers none \
  --config 16,32,4,1,ring2 --config 16,32,4,1,ring2,merge \
  --case 64,4096,16,1 --case 128,4096,16,1 --case 64,8192,16,1 --case 128,8192,16,1 --case 32,32768,16,1 \
  --case 64,4096,16,1,fp8 --case 128,4096,16,1,fp8 > "$OUT/ring-merge-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|^  B|^\|" "$OUT/ring-merge-probe-$COMMIT.txt" | grep -v "^# _mla" | head -40
