#!/usr/bin/env bash
# One device call (edit per session). This one: the ring gpu tests after the decode kernels stopped letting the
# combine launch early (they still wait for the previous kernel), then an A/B of the harness in one call:
# BASE (no PDL) and COMMIT, alternating, at the batch-1 and B64 cases.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh  (BASE's src in ab_base/)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring_plan or ring_public or ring_depths or ring_cuda_graph or cuda_graph or W300-causal or test_gpu_warp_specialized and H128" \
  > "$OUT/gpu-tests-decode-rest-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-decode-rest-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-decode-rest-$COMMIT.txt" | head -20
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    PYTHONPATH=$path timeout 120 python3 -m pagedmla.cli bench decode --heads 16 128 --batch 1 64 --keys 4096 16384 \
      --kv-dtype bf16 --no-reference --commit "$rev" --json "$OUT/ab-decode-$rev-run$run.json" \
      > "$OUT/ab-decode-$rev-run$run.txt" 2>&1
    echo "== $rev run $run rc $?"; grep -E "^ceilings|^decode" "$OUT/ab-decode-$rev-run$run.txt" | awk '{print $1,$2,$3,$4,$7,$11}'
  done
done
