#!/usr/bin/env bash
# One device call (edit per session). This one: Nsight Compute's per-instruction stall samples (sm_90a SASS) of
# the Gluon decode kernel at 128 heads B1 N16384, as CSV, to find where its 23 us go.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --clock-control none -k regex:_mla_decode_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o /tmp/ws-b1 -f \
  python3 scripts/ncu_decode.py 1,16384,128,1 > "$OUT/ncu-ws-b1-run.txt" 2>&1
echo "ncu rc $?"; tail -3 "$OUT/ncu-ws-b1-run.txt"
timeout 100 $NCU -i /tmp/ws-b1.ncu-rep --page source --csv --print-source sass > "$OUT/ncu-ws-b1-sass-$COMMIT.csv" 2>&1
echo "export rc $?"; head -c 600 "$OUT/ncu-ws-b1-sass-$COMMIT.csv"; echo; wc -l "$OUT/ncu-ws-b1-sass-$COMMIT.csv"
timeout 60 $NCU -i /tmp/ws-b1.ncu-rep --page details --section WarpStateStats --print-details all \
  > "$OUT/ncu-ws-b1-warpstate-$COMMIT.txt" 2>&1
grep -iE "stall|cycles" "$OUT/ncu-ws-b1-warpstate-$COMMIT.txt" | head -40
