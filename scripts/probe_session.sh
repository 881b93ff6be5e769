#!/usr/bin/env bash
# One device call (edit per session). This one: ring plans with no fixed cost per sequence when every sequence has
# two workers or more (equal pieces): the ring's plan and graph tests, then the harness's 16-head B64 / B128 rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring_plan or ring_cuda_graph or public_dispatch" > "$OUT/gpu-tests-fixed0-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-fixed0-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-fixed0-$COMMIT.txt" | head
timeout 100 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --kv-dtype bf16 fp8 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-decode-h16-$COMMIT.json" > "$OUT/bench-decode-h16-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^decode" "$OUT/bench-decode-h16-$COMMIT.txt" | cut -c1-140
