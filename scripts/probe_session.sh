#!/usr/bin/env bash
# One device call (edit per session). This one: per-kernel device times (torch.profiler) of the two decode cases
# still short of their targets: B1 N16384 at 128 heads (Gluon kernel + combine) and B64 N4096 at 16 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 benchmarks/decode_probe.py --profile --case 1,16384,128,1 --case 64,4096,16,1 \
  > "$OUT/decode-profile-$COMMIT.txt" 2>&1
echo "rc $?"; grep -E "^#|profile|B1 N16384|B64 N4096" "$OUT/decode-profile-$COMMIT.txt" | grep -v "_mla_decode_kernel:" | head -20
