#!/usr/bin/env bash
# One device call (edit per session). This one: the decode probe's plan column as the plan kernel's device time
# (torch.profiler) instead of a graph replay of it alone.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 benchmarks/decode_probe.py --profile --ring-plan --case 64,4096,16,1 --case 1,16384,128,1 \
  > "$OUT/plan-device-$COMMIT.txt" 2>&1
echo "rc $?"; grep -E "profile|default:|^\|" "$OUT/plan-device-$COMMIT.txt" | cut -c1-160
