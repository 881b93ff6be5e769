#!/usr/bin/env bash
# One device call (edit per session). This one, the session's last: after the review's fix (the rescale of a
# pair's empty block a), the sparse gpu tier and the dense warp-specialized and graph tests, then the harness's
# decode, mtp and sparse rows at this commit (the table of BENCHMARKS.md's targets).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "sparse tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k "warp_specialized or graph" \
  > "$OUT/gpu-tests-decode-ws-$COMMIT.txt" 2>&1
echo "ws tests rc $?"; tail -1 "$OUT/gpu-tests-decode-ws-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-decode-ws-$COMMIT.txt" | head
run() {  # name, then bench arguments
  local name=$1; shift
  timeout 110 python3 -m pagedmla.cli bench "$@" --no-reference --commit "$COMMIT" --json "$OUT/bench-$name-$COMMIT.json" \
    > "$OUT/bench-$name-$COMMIT.txt" 2>&1
  echo "$name rc $?"; grep -E "^(decode|mtp|sparse) |ceiling" "$OUT/bench-$name-$COMMIT.txt" | cut -c1-120
}
run decode decode --heads 16 128
run mtp mtp
run sparse sparse --heads 128 64 --batch 64 128 --keys 8192 32768 --kv-dtype fp8
run sparse-h16 sparse --heads 16 --batch 64 128 --kv-dtype bf16
