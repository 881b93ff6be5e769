#!/usr/bin/env bash
# One device call (edit per session). This one: combine tiles (torch.profiler device times) at 16 heads B64 /
# B128 N4096 on ring plans (about 4 and 2 pieces per sequence) and at 128 heads B1 N16384 (67 pieces).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
few=""; for c in 2,4,512,4 4,4,512,4 8,4,512,8 4,16,128,4 8,16,64,4 4,8,256,4 8,2,512,4 4,1,512,4 8,8,128,4 \
  4,4,256,4 4,16,64,2 8,16,32,4 8,4,128,4; do few="$few --combine $c"; done
timeout 200 python3 benchmarks/decode_probe.py --profile --ring-plan --case 64,4096,16,1 --case 128,4096,16,1 $few \
  > "$OUT/combine-few-$COMMIT.txt" 2>&1
echo "few rc $?"; grep -E "profile|default:" "$OUT/combine-few-$COMMIT.txt" | cut -c1-120
many=""; for c in 128,1,64,4 128,2,32,4 128,4,16,4 128,1,64,8 128,2,64,8 128,1,32,2 128,8,8,4; do many="$many --combine $c"; done
timeout 150 python3 benchmarks/decode_probe.py --profile --case 1,16384,128,1 $many > "$OUT/combine-many-$COMMIT.txt" 2>&1
echo "many rc $?"; grep -E "profile|default:" "$OUT/combine-many-$COMMIT.txt" | cut -c1-120
