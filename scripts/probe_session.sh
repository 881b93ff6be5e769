#!/usr/bin/env bash
# One device call (edit per session). Twenty-fourth session, call 6: the register-operand 16-row FP8 kernel with
# the consumers' k_empty guard before their k_ready parity waits (the fix for the "warp illegal instruction" the
# core dump of call 5 showed at the loader's expect): its ws16 gpu tests, the harness at 16 heads, then the
# crash hunt (fp8_crash_loop.py, which failed at iteration 385 in call 5) for ITERS iterations with core dumps on.
# Usage on the device: COMMIT=<sha> OUT=<dir> [ITERS=1200] [LIMIT=320] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-rs-$COMMIT.txt"
PYTHONPATH=src timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ws16 and registers or automatic" > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -5 "$f"
export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_COREDUMP_FILE="$OUT/core.%p"
export CUDA_COREDUMP_GENERATION_FLAGS="skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory,skip_constbank_memory"
f="$OUT/crash-loop-$COMMIT.txt"
PYTHONPATH=src timeout "${LIMIT:-320}" python3 benchmarks/experiments/fp8_crash_loop.py --iters "${ITERS:-1200}" > "$f" 2>&1
echo "loop rc $?"; grep -v CUDAEvent "$f" | tail -2; grep -c "B128.*: ok" "$f"
core=$(ls "$OUT"/core.* 2>/dev/null | head -1)
if [ -n "$core" ]; then
  timeout 120 cuda-gdb -batch -ex "target cudacore $core" -ex "info cuda kernels" -ex "bt" -ex "x/40i \$pc-320" \
    -ex "info cuda warps" > "$OUT/core-read.txt" 2>&1
  head -70 "$OUT/core-read.txt"; rm -f "$core"
fi
