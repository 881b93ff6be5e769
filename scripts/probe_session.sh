#!/usr/bin/env bash
# One device call (edit per session). This one: the sparse decode launched as programmatic dependents. The wait
# tests (dense and sparse) and a sample of the sparse gpu tier, then an A/B of `bench sparse` against BASE
# (ab_base/), alternating.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  tests/test_decode_triton.py -k "waits_for or sparse_ring_matches or sparse_ws_matches or gluon_cuda_graph or all_minus_one" \
  > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 150 python3 -m pagedmla.cli bench sparse --heads 16 128 --batch 1 8 64 --kv-dtype bf16 fp8 \
      --no-reference --commit "$rev" > "$OUT/ab-sparse-${rev:0:7}-run$run.txt" 2>&1
    echo "== ${rev:0:7} run $run rc $?"; grep -E "^ceilings|^sparse" "$OUT/ab-sparse-${rev:0:7}-run$run.txt" | awk '{print $2,$3,$4,$5,$6,$7,$8,$11,$12}'
  done
done
