#!/usr/bin/env bash
# One device call (edit per session). This one: after the review, the test in which the kernel before the decode
# lets it launch early and writes q or the cache late, on this tree and on a mutant (ab_base/: the decode
# kernels' waits removed), which it must fail (the writer now spins 3 ms after a warmed-up decode).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh  (the mutant's src in ab_base/)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "waits_for" > "$OUT/gpu-tests-waits-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-waits-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-waits-$COMMIT.txt" | head -10
PYTHONPATH=ab_base/src timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "waits_for" > "$OUT/gpu-tests-waits-mutant-$COMMIT.txt" 2>&1
echo "mutant tests rc $? (expected: failures)"; tail -1 "$OUT/gpu-tests-waits-mutant-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-waits-mutant-$COMMIT.txt" | head -10
