#!/usr/bin/env bash
# One device call (edit per session). This one: the dense decode kernels let the combine launch at their very end
# (griddepcontrol.launch_dependents as each program's last instruction): the wait test and graph replays, an A/B
# of the harness against BASE (ab_base/), alternating, and the ring timeline with raw stamps.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "waits_for or cuda_graph" > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 120 python3 -m pagedmla.cli bench decode --heads 16 128 --batch 1 64 128 --keys 4096 16384 \
      --kv-dtype bf16 --no-reference --commit "$rev" > "$OUT/ab-decode-${rev:0:7}-run$run.txt" 2>&1
    echo "== $rev run $run rc $?"; grep -E "^ceilings|^decode" "$OUT/ab-decode-${rev:0:7}-run$run.txt" | awk '{print $1,$2,$3,$4,$7,$11}'
  done
done
PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 --case 64,4096,16,1,fp8 \
  --json "$OUT/ring-timeline-$COMMIT.json" > "$OUT/ring-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"; grep -E "case|call|loop_end|exit|next_entry" "$OUT/ring-timeline-$COMMIT.txt"
