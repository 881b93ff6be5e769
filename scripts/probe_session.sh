#!/usr/bin/env bash
# One device call (edit per session). This one: the dense combine launched as a programmatic dependent (PDL)
# against a plain launch, in one process (whole-call graph times), and Nsight Compute profiles of the 16-head
# ring kernel over the rope-aware FP8 cache and the bf16 cache (where the FP8 path's time goes).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=/usr/local/cuda/bin/ncu
timeout 200 python3 benchmarks/decode_probe.py --case 64,4096,16,1 --case 128,4096,16,1 --case 1,16384,16,1 \
  --case 1,16384,128,1 --case 64,4096,128,1 --case 64,4096,16,1,fp8 --profile --combine default,0 --combine default,1 \
  > "$OUT/pdl-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|profile|^\|" "$OUT/pdl-probe-$COMMIT.txt" | grep -v "^# _mla" | head -60
for kind in fp8 bf16; do
  case=64,4096,16,1; [ $kind = fp8 ] && case=64,4096,16,1,fp8
  timeout 150 $NCU --clock-control none -k regex:_mla_decode_ring_kernel --launch-skip 1 --launch-count 1 \
    --section SchedulerStats --section WarpStateStats --section InstructionStats --section SourceCounters \
    --section SpeedOfLight -o "$OUT/ring-$kind" python3 scripts/ncu_decode.py $case > "$OUT/ncu-$kind.log" 2>&1
  echo "ncu $kind rc $?"; tail -2 "$OUT/ncu-$kind.log"
  $NCU -i "$OUT/ring-$kind.ncu-rep" --page details --csv > "$OUT/ring-$kind-details.csv" 2>&1
  grep -E "Duration|Executed Ipc|Issue Slots Busy|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions\"|Memory Throughput|Active Warps" \
    "$OUT/ring-$kind-details.csv" | cut -d, -f12- | head -20
  $NCU -i "$OUT/ring-$kind.ncu-rep" --page source --csv --print-source sass > "$OUT/ring-$kind-source.csv" 2>&1
  python3 scripts/ncu_hot.py "$OUT/ring-$kind-source.csv" 22 2>&1 | head -55
  rm -f "$OUT/ring-$kind.ncu-rep"
done
