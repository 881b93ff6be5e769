#!/usr/bin/env bash
# One device call (edit per session). This one: the ring gpu tests; an A/B in one process of the ring kernel
# as of f84b55a against this commit's (benchmarks/_ab_ring.py, not committed: the bf16 16-head rows measured
# 84.1-84.3 us at f84b55a/975480e and 88.2 at 1ff0738/112a4a0, on different calls); the harness's 16-head rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py -k ring \
  > "$OUT/gpu-tests-ring-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-ring-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-ring-$COMMIT.txt" | head -20
timeout 150 python3 benchmarks/_ab_ring.py > "$OUT/ab-ring-$COMMIT.txt" 2>&1
echo "ab rc $?"; tail -14 "$OUT/ab-ring-$COMMIT.txt"
timeout 150 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 fp8 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-fp8-$COMMIT.json" > "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" | cut -c1-160
