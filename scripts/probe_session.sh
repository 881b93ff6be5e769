#!/usr/bin/env bash
# One device call (edit per session). This one: the batch-1 combine tiles. Harness rows at batch 1 (16 and 128
# heads) at this commit and at BASE (same run, A/B), the 16-head B64 / B128 rows, then the whole dense decode
# gpu tier.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh (BASE's src in ab_base/,
# carried: `git archive BASE src | tar -x -C ab_base`)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
test -d ab_base/src || echo "no ab_base/src"
bench() {  # sha, src, extra args...
  local sha=$1 src=$2; shift 2
  PYTHONPATH=$src timeout 120 python3 -m pagedmla.cli bench decode --no-reference --commit "$sha" \
    --json "$OUT/bench-decode-$sha-$RANDOM.json" "$@" > "$OUT/bench.txt" 2>&1
  echo "bench $sha $* rc $?"; grep -E "^ceilings|^decode" "$OUT/bench.txt" | cut -c1-120
  cat "$OUT/bench.txt" >> "$OUT/bench-decode-all.txt"
}
bench "$COMMIT" src --heads 16 128 --batch 1
bench "$BASE" ab_base/src --heads 16 128 --batch 1
bench "$COMMIT" src --heads 16 --batch 64 128 --kv-dtype bf16 fp8
PYTHONPATH=src timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  > "$OUT/gpu-tests-decode-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-decode-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-decode-$COMMIT.txt" | head
