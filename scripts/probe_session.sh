#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse gpu tests (new combine tiles), then `bench all` for
# BENCHMARKS.md. Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu tests/test_sparse_decode_triton.py -p no:cacheprovider -rf 2>&1 \
  | tee "$OUT/gpu-tests-sparse.log" | tail -3
timeout 420 python3 -m pagedmla.cli bench all --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/results.json" \
  --csv "$OUT/results.csv" > "$OUT/bench.txt" 2> "$OUT/bench.stderr"
grep -v "^\[" "$OUT/bench.txt"
