#!/usr/bin/env bash
# One device call (edit per session). This one: the final check. The sparse gpu tier and the dense wait test,
# then the targets of issues 4 and 5 through the harness (the same commands as the fifteenth session's table).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  tests/test_decode_triton.py::test_gpu_decode_waits_for_the_kernel_before > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
run() {  # name, then bench arguments
  local name=$1; shift
  timeout 150 python3 -m pagedmla.cli bench "$@" --no-reference --commit "$COMMIT" --json "$OUT/bench-$name-$COMMIT.json" \
    > "$OUT/bench-$name-$COMMIT.txt" 2>&1
  echo "== $name rc $?"; grep -E "^ceilings|^(decode|mtp|sparse) " "$OUT/bench-$name-$COMMIT.txt" | sed 's/  */ /g' | cut -c1-100
}
run decode decode --heads 16 128 --kv-dtype bf16
run decode-n8192 decode --heads 16 128 --batch 64 --keys 8192
run decode-fp8 decode --heads 16 --batch 64 128 --keys 4096 --kv-dtype fp8
run mtp mtp
run sparse-fp8 sparse --heads 128 64 --batch 64 128 --keys 32768 --kv-dtype fp8
run sparse-h16 sparse --heads 16 --batch 64 128 --kv-dtype bf16
