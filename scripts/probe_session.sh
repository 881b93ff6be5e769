#!/usr/bin/env bash
# One device call (edit per session). This one: the ring kernel merges split sequences itself (no combine kernel):
# the ring's gpu tests, then the harness's 16-head B64 / B128 rows at this commit and at BASE (same run, A/B).
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh (BASE's src in ab_base/, untracked)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring" > "$OUT/gpu-tests-ring-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-ring-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-ring-$COMMIT.txt" | head
test -d ab_base/src || echo "no ab_base/src: make it with git archive BASE src | tar -x -C ab_base"
for run in "$COMMIT:src" "$BASE:ab_base/src" "$COMMIT:src"; do
  sha=${run%%:*}; PYTHONPATH=${run#*:} timeout 100 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 \
    --kv-dtype bf16 fp8 --no-reference --commit "$sha" --json "$OUT/bench-decode-h16-$sha-$RANDOM.json" \
    > "$OUT/bench.txt" 2>&1
  echo "bench $sha rc $?"; grep -E "^ceilings|^decode" "$OUT/bench.txt" | cut -c1-140; cat "$OUT/bench.txt" >> "$OUT/bench-decode-h16-all.txt"
done
