#!/usr/bin/env bash
# One device call (edit per session). This one: Nsight Compute on one launch of the dense decode kernel per case
# (16 heads FP8 and bf16, 128 heads bf16, B64 N4096): throughput, warp stall reasons per issued instruction.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
which ncu || ls /opt/nvidia/nsight-compute/*/ncu
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
for c in 64,4096,16,1,fp8 64,4096,16,1 64,4096,128,1; do
  timeout 150 $NCU --clock-control none -k regex:_mla_decode_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg" \
    python3 scripts/ncu_decode.py $c > "$OUT/ncu-${c//,/_}.txt" 2>&1
  echo "== $c"; grep -E "Duration|Memory Throughput|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Registers Per|Achieved Occupancy|L1/TEX Hit|Shared Memory|inst_executed.sum|cycles_elapsed.avg|Error|ERR" "$OUT/ncu-${c//,/_}.txt" | head -24
  grep -E "stalled_.*ratio" "$OUT/ncu-${c//,/_}.txt" | awk '{print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k2 -g -r | head -9 | tr '\n' ';'; echo
done
