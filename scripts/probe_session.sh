#!/usr/bin/env bash
# One device call (edit per session). This one: where the decode kernels' fixed cost per call goes. Per-kernel
# times (torch.profiler, eager) of one- and two-block programs, one program (B1) and a full wave (B128 / B64),
# for the 16-row Triton tile at several pipeline depths, loop structures and warp counts, and for the Gluon kernel.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
F="$OUT/fixed-cost-$COMMIT.txt"
timeout 200 python3 benchmarks/decode_probe.py --sweep --profile --workers none \
  --case 1,64,16,1 --case 128,64,16,1 --case 128,128,16,1 --case 128,640,16,1 \
  --config 16,64,8,5,interior --config 16,64,8,5 --config 16,64,8,2,interior --config 16,64,8,2 \
  --config 16,64,4,2 --config 16,32,8,3 > "$F" 2>&1
echo "probe rc $?"
timeout 120 python3 benchmarks/decode_probe.py --sweep --profile --workers none \
  --case 1,64,128,1 --case 64,64,128,1 --case 64,128,128,1 --case 64,640,128,1 --config 64,64,8,2,ws >> "$F" 2>&1
echo "probe rc $?"
grep -E "^#|W[0-9]+ |profile|^\|" "$F" | grep -v "^| ---\|_mla_decode_kernel:"
