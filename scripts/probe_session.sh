#!/usr/bin/env bash
# One device call (edit per session). This one: Nsight Compute's per-instruction stall samples (sm_90a SASS) of
# the warp-specialized sparse decode at the V3.2 shape (128 heads, B64, 2 query tokens, topk 2048, FP8).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
timeout 200 $NCU --clock-control none -k regex:_mla_sparse_decode_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --import-source no -o /tmp/sws -f python3 scripts/ncu_sparse.py 64,2,128,2048 > "$OUT/ncu-sws-run.txt" 2>&1
echo "ncu rc $?"; tail -3 "$OUT/ncu-sws-run.txt"
timeout 100 $NCU -i /tmp/sws.ncu-rep --page source --csv --print-source sass > "$OUT/ncu-sws-sass-$COMMIT.csv" 2>&1
echo "export rc $?"; wc -l "$OUT/ncu-sws-sass-$COMMIT.csv"
timeout 60 $NCU -i /tmp/sws.ncu-rep --page details --print-details all > "$OUT/ncu-sws-details-$COMMIT.txt" 2>&1
grep -iE "stall|duration|throughput|issued|eligible|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth" \
  "$OUT/ncu-sws-details-$COMMIT.txt" | head -60
