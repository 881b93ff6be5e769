#!/usr/bin/env bash
# One device call (edit per session). This one: ncu of the dense and sparse ring kernels on the same rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 250 ncu -k regex:ring_kernel --launch-skip 0 --launch-count 4 --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  python3 benchmarks/experiments/ring_pattern_ab.py --eager > "$OUT/ncu-ring-$COMMIT.txt" 2>&1
echo "ncu rc $?"; grep -E "ring_kernel|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|DRAM Throughput|Warp Cycles Per Issued|Stall|Shared Memory Configuration Size|Dynamic Shared|Waves Per SM" "$OUT/ncu-ring-$COMMIT.txt" | head -80
