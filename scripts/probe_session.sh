#!/usr/bin/env bash
# One device call (edit per session). Prepared for the twenty-third session: the register-operand 16-row FP8
# kernel (kernels.mla_decode_ws16_rs) at the twenty-second session's final commit, whose last two changes (the
# plan's long_pieces flag, one epilogue for both kernels) never ran on a GPU: the ws16 gpu tests (each runs on both
# kernels, and test_gpu_ws16_automatic_choice, new, through the public op), ws16_stress.py on the new kernel,
# then the harness (the other decode and sparse gpu tests passed at 203b1f4: 460, about 6.5 min).
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
for args in "--batch 64 128 --keys 4096" "--batch 1 --keys 16384"; do
  f="$OUT/bench-decode-h16-$(echo $args | tr -d ' -')-$COMMIT.txt"
  PYTHONPATH=src timeout 150 python3 -m pagedmla.cli bench decode --heads 16 $args --kv-dtype bf16 fp8 --no-reference \
    > "$f" 2>&1
  echo "bench $args rc $?"; tail -8 "$f"
done
