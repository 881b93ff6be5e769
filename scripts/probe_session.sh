#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 9: the register FP8 kernel with its hand-over
# buffer padded (no bank conflicts in the consumers' accesses): its gpu tests, the crash hunt, then the harness
# at 16 heads twice.
# Usage on the device: COMMIT=<sha> OUT=<dir> [ITERS=100] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "${TESTS:-ws16 and (registers or automatic)}" > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
f="$OUT/crash-loop-$COMMIT.txt"
PYTHONPATH=src timeout 60 python3 benchmarks/experiments/fp8_crash_loop.py --iters "${ITERS:-100}" > "$f" 2>&1
echo "loop rc $?"; grep -v CUDAEvent "$f" | tail -1
for run in 1 2; do
  f="$OUT/bench$run-decode-h16-$COMMIT.txt"
  PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
    --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
  echo "bench rc $?"; tail -5 "$f"
done
