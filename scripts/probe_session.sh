#!/usr/bin/env bash
# One device call (edit per session). This one, the session's last: the whole sparse gpu tier and the FP8 dense
# decode gpu tests (the e4m3 conversion's asm became a shared constant; same PTX), the A/B of the ring kernel
# against f84b55a again (benchmarks/_ab_ring.py, not committed), then the harness's sparse suite (128 and 64
# heads FP8) and its 16-head rows (bf16 and FP8, B64 and B128).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k "fp8" \
  > "$OUT/gpu-tests-decode-fp8-$COMMIT.txt" 2>&1
echo "decode fp8 tests rc $?"; tail -1 "$OUT/gpu-tests-decode-fp8-$COMMIT.txt"
timeout 120 python3 benchmarks/_ab_ring.py > "$OUT/ab-ring-$COMMIT.txt" 2>&1
echo "ab rc $?"; grep "kernel only" "$OUT/ab-ring-$COMMIT.txt"
timeout 120 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 fp8 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-fp8-$COMMIT.json" > "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" 2>&1
echo "bench h16 rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" | cut -c1-160
timeout 120 python3 -m pagedmla.cli bench sparse --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-sparse-$COMMIT.json" > "$OUT/bench-sparse-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-$COMMIT.txt" | cut -c1-160
