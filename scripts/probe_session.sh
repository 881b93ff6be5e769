#!/usr/bin/env bash
# One device call (edit per session). This one: Nsight Compute on 128 heads B1 N16384 (the Gluon decode kernel
# and the combine, full set), to see where the kernel's 23 us go.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
for k in _mla_decode_ws_kernel _mla_decode_combine_kernel; do
  timeout 200 $NCU --clock-control none -k regex:$k --launch-skip 1 --launch-count 1 --set full --page details \
    python3 scripts/ncu_decode.py 1,16384,128,1 > "$OUT/ncu-b1-h128-$k-$COMMIT.txt" 2>&1
  echo "ncu $k rc $?"
  grep -E "^ +(Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|Block Limit|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Executed Ipc Active|SM Busy|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit|Dynamic Shared|Grid Size|Block Size)" \
    "$OUT/ncu-b1-h128-$k-$COMMIT.txt" | head -40
  grep -iE "stall|est\. speedup" "$OUT/ncu-b1-h128-$k-$COMMIT.txt" | cut -c1-200 | head -14
done
