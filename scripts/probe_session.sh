#!/usr/bin/env bash
# One device call (edit per session). This one: 64-row bf16 tiles keep per-key partial softmax sums (one
# cross-warpgroup reduction less per key block): the decode gpu tests of 64-row tiles, then the harness at 128
# heads (decode, MTP) to compare with 173cf50.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "H128 or 128 or cuda_graph or partitions or deepseek_shapes" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 150 python3 -m pagedmla.cli bench decode --heads 128 --no-reference --json "$OUT/bench-decode.json" \
  > "$OUT/bench-decode.txt" 2>&1
timeout 100 python3 -m pagedmla.cli bench mtp --heads 128 --batch 64 --no-reference --json "$OUT/bench-mtp.json" \
  > "$OUT/bench-mtp.txt" 2>&1
grep -E "^ceilings|^decode|^mtp" "$OUT/bench-decode.txt" "$OUT/bench-mtp.txt" | sed 's/^.*txt://' | cut -c1-120
