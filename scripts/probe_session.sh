#!/usr/bin/env bash
# One device call (edit per session). This one: the fused combine (the attention kernel merges split sequences of
# one row tile): decode gpu tests at 16 heads, the Gluon kernel's default path and graph replays (240 s cap),
# then the 16-head B64 cases with and without the fused combine at 128 / 130 / 132 workers.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "fused or H16 or partitions or graph_replay or other_dtypes or default_decode_takes" \
  > "$OUT/gpu-tests-fused-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-fused-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-fused-$COMMIT.txt" | head
for c in "64,4096,16,1 --config 16,64,8,5,interior" "64,4096,16,2 --config 32,64,8,5,interior"; do
  timeout 150 python3 benchmarks/decode_probe.py --sweep --unfused --workers 128,130,132 --profile --case $c \
    >> "$OUT/fused-combine-$COMMIT.txt" 2>&1
  echo "probe rc $?"
done
grep -E "^#|W1|profile|^\|" "$OUT/fused-combine-$COMMIT.txt" | grep -v "^| ---"
