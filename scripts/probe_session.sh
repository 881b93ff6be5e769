#!/usr/bin/env bash
# One device call (edit per session). This one: B64 N4096 at 16 heads with the ring planned (256 workers, 32-key
# units) against the Triton tile at 128 workers, kernel and combine times (combine 2 or 4 pieces per step; also at
# 128 heads B16); then the harness's 16-head decode rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/decode_probe.py --sweep --workers 128,256 --case 64,4096,16,1 --case 64,4096,16,1,fp8 \
  --config 16,64,8,5,interior --config 16,32,4,1,ring2 --profile --combine 2,4,512,4 --combine 4,4,512,4 \
  > "$OUT/ring-b64-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^#" "$OUT/ring-b64-$COMMIT.txt" | grep -v "^|" | cut -c1-150
timeout 100 python3 benchmarks/decode_probe.py --case 16,4096,128,1 --profile --combine 2,4,512,4 \
  --combine 4,4,512,4 > "$OUT/combine-h128-$COMMIT.txt" 2>&1
echo "probe h128 rc $?"; grep profile "$OUT/combine-h128-$COMMIT.txt" | cut -c1-150
timeout 150 python3 -m pagedmla.cli bench decode --heads 16 --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-decode-h16-$COMMIT.json" > "$OUT/bench-decode-h16-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^decode" "$OUT/bench-decode-h16-$COMMIT.txt" | cut -c1-140
