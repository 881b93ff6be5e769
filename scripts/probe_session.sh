#!/usr/bin/env bash
# One device call (edit per session). This one: the combine kernel's device time per config, next to the
# decode kernel's, for split cases at 16 and 128 heads. Usage on the device: OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
C=""
for c in 4,8,128,4 2,8,128,4 2,16,128,4 2,32,128,8 2,4,512,4 2,8,256,4 4,4,128,4 1,16,128,4 2,16,64,2 8,4,128,4; do
  C="$C --combine $c"
done
timeout 400 python3 benchmarks/decode_probe.py --profile --case 64,4096,16,1 --case 1,16384,16,1 --case 64,4096,128,1 \
  --case 1,16384,128,1 --case 16,4096,128,1 $C --json "$OUT/combine.json" > "$OUT/combine.txt" 2>&1
grep -h "profile\|Error\|error" "$OUT"/combine.txt | head -80
