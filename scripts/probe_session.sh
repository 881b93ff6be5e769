#!/usr/bin/env bash
# One device call (edit per session). This one: which of the two L2 hints of the commit (partials stored with
# evict_last, read by the dense combine with evict_first) makes the 16-head decode faster, and whether the sparse
# ring's stored hint changes the sparse decode; then the dense and sparse gpu tiers at COMMIT.
# Trees: BASE (ab_base/, the commit before the hints), STORES (ab_s/, the stores' hint only), LOADS (ab_l/, the
# combine's hint only), COMMIT (src/, both). Carry each as `git archive <sha> src | tar -x -C ab_x`.
# Usage on the device: COMMIT=<sha> BASE=<sha> STORES=<sha> LOADS=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
trees="$BASE:ab_base/src $STORES:ab_s/src $LOADS:ab_l/src $COMMIT:src"
for run in 1 2; do
  for tree in $trees; do
    rev=${tree%%:*}; path=${tree#*:}
    f="$OUT/ab-decode-${rev:0:7}-run$run.txt"
    PYTHONPATH=$path timeout 45 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
      --kv-dtype bf16 --no-reference --commit "$rev" > "$f" 2>&1
    echo "== decode ${rev:0:7} run $run"; grep -E "^decode" "$f" | cut -c1-100
  done
done
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    f="$OUT/ab-sparse-${rev:0:7}-run$run.txt"
    PYTHONPATH=$path timeout 60 python3 -m pagedmla.cli bench sparse --heads 16 --batch 64 128 --kv-dtype bf16 \
      --no-reference --commit "$rev" > "$f" 2>&1
    echo "== sparse ${rev:0:7} run $run"; grep -E "^ceilings|^sparse" "$f" | cut -c1-100
  done
done
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  tests/test_sparse_decode_triton.py > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
