#!/usr/bin/env bash
# One device call (edit per session). This one: keys-major logits (warpgroup MMAs on 16-row tiles) against the
# default mma.sync tiles, 16-head dense decode, bf16 and FP8, B64 N4096 (probe's error check against float32).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
BF="--config 16,64,8,5,interior --config 16,64,8,3,interior,km --config 16,64,8,2,prefetch,interior,km --config 16,64,4,3,interior,km --config 16,64,4,2,prefetch,interior,km"
timeout 200 python3 benchmarks/decode_probe.py --sweep --case 64,4096,16,1 $BF --workers 128 > "$OUT/bf16.txt" 2>&1
F8="--config 16,64,8,3,prefetch --config 16,64,8,3,prefetch,km --config 16,64,8,2,prefetch,km --config 16,64,4,3,prefetch,km --config 16,64,4,2,prefetch,km --config 16,64,8,4,km"
timeout 200 python3 benchmarks/decode_probe.py --sweep --case 64,4096,16,1,fp8 $F8 --workers 128 > "$OUT/fp8.txt" 2>&1
grep -E "^#|TB/s|failed|Error" "$OUT/bf16.txt" "$OUT/fp8.txt" | grep -v "^.*# _mla" | sed 's/^.*txt://' | cut -c1-150
