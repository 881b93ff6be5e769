#!/usr/bin/env bash
# One device call (edit per session). This one: Nsight Compute on one launch each of the prefill kernel (B1 L8192
# H128), the sparse FP8 decode (B64 q2 topk 2048 H128) and the sparse bf16 decode (B64 q2 topk 2048 H16), run
# through the benchmark CLI: throughput and warp stall reasons per issued instruction.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=$(which ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
FAST="--no-reference --no-baselines --no-graph --warmup-ms 1 --rep-ms 1"
run() {  # name kernel-regex bench-args...
  local name=$1 kern=$2; shift 2
  timeout 170 $NCU --clock-control none -k "regex:$kern" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section SourceCounters \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg" \
    python3 -m pagedmla.cli bench "$@" $FAST > "$OUT/ncu-$name.txt" 2>&1
  echo "== $name"; grep -E "Duration|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|L2 Hit|inst_executed.sum|cycles_elapsed.avg|Dynamic Shared|ERR|rror" "$OUT/ncu-$name.txt" | head -16
  grep -E "stalled_.*ratio" "$OUT/ncu-$name.txt" | awk '{print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | sort -k2 -g -r | head -9 | tr '\n' ';'; echo
}
run prefill _mla_prefill_kernel prefill --heads 128 --batch 1 --keys 8192
run sparse-fp8-h128 _mla_sparse_decode_kernel sparse --heads 128 --batch 64 --kv-dtype fp8
run sparse-bf16-h16 _mla_sparse_decode_kernel sparse --heads 16 --batch 64 --kv-dtype bf16
