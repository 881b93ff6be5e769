#!/usr/bin/env bash
# One device call (edit per session). Prepared for the twenty-fourth session: the register-operand 16-row FP8
# kernel at the twenty-third session's last commit, whose last kernel change (the softmax maximum's floor on
# log2 |scale|, from a review) and whose new test (test_gpu_ws16_zero_and_negative_scales) never ran on a GPU:
# the ws16 gpu tests on both kernels, the stress script on the register kernel, then the harness at 16 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 330 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -k ws16 \
  > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
PYTHONPATH=src timeout 60 python3 -c "import sys, runpy
from pagedmla.ops import _triton_decode; _triton_decode.WS16_KERNEL = 'registers'; sys.argv = ['ws16_stress.py', '--reps', '1']
runpy.run_path('benchmarks/experiments/ws16_stress.py', run_name='__main__')" > "$OUT/stress-rs-$COMMIT.txt" 2>&1
echo "stress rc $?"; grep -E "over|worst|Error|differ" "$OUT/stress-rs-$COMMIT.txt" | head -8
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -5 "$f"
