#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse heuristic's FP8 64-row tile at 2 stages (was 3): the
# sparse gpu tier and the two-per-SM FP8 decode test (not yet run on a GPU in its final form), then the
# harness's sparse suite (128 and 64 heads FP8; 16 heads bf16).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  "tests/test_decode_triton.py::test_gpu_fp8_two_programs_per_sm" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 90 python3 -m pagedmla.cli bench sparse --no-reference --json "$OUT/bench-sparse.json" > "$OUT/bench-sparse.txt" 2>&1
timeout 90 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 --batch 64 128 --no-reference \
  --json "$OUT/bench-sparse-h16.json" > "$OUT/bench-sparse-h16.txt" 2>&1
grep -E "^ceilings|^sparse" "$OUT/bench-sparse.txt" "$OUT/bench-sparse-h16.txt" | sed 's/^.*txt://' | cut -c1-130
