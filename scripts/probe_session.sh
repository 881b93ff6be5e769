#!/usr/bin/env bash
# One device call (edit per session). This one: the plan kernel without int64 divisions: its device time in the
# decode probe, the span arithmetic on the GPU, and the decode gpu tests that run plans (graphs, splits, rings).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
: timeout 60 python3 benchmarks/decode_probe.py --profile --ring-plan --case 64,4096,16,1 --case 1,16384,128,1 \
  > "$OUT/plan-device-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "profile|default:|^\| [0-9]" "$OUT/plan-device-$COMMIT.txt" | cut -c1-160
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "span or partitions or graph" > "$OUT/gpu-tests-plan-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-plan-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-plan-$COMMIT.txt" | head
