#!/usr/bin/env bash
# One device call (edit per session). This one: two ring-decode experiments against BASE, alternating in one call:
# TRIG (the ring lets the combine launch at its start, ab_trig/) and COMMIT (that, plus q staged by asynchronous
# copies issued before the first key block's). First the ring's gpu tests on COMMIT, last COMMIT's timeline.
# Usage on the device: COMMIT=<sha> TRIG=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "test_gpu_ring or waits_for or cuda_graph" > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$TRIG:ab_trig/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 120 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 8192 \
      --kv-dtype bf16 fp8 --no-reference --commit "$rev" > "$OUT/ab-decode-${rev:0:7}-run$run.txt" 2>&1
    echo "== ${rev:0:7} run $run rc $?"; grep -E "^ceilings|^decode" "$OUT/ab-decode-${rev:0:7}-run$run.txt" | awk '{print $1,$2,$3,$4,$5,$7,$11}'
  done
done
PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ring_timeline.py --case 64,4096,16,1 \
  --json "$OUT/ring-timeline-$COMMIT.json" > "$OUT/ring-timeline-$COMMIT.txt" 2>&1
echo "timeline rc $?"; grep -E "case|call|loop_start|loop_end|exit|next_entry" "$OUT/ring-timeline-$COMMIT.txt"
