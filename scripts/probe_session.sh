#!/usr/bin/env bash
# One device call (edit per session). Twenty-fourth session, call 4: the harness's FP8-only run at 16 heads
# (B64 then B128, N4096) failed once with "unspecified launch failure" in call 2 (the shipped kernel's code);
# four reruns passed (call 3). Repeat its cases in PROCS fresh processes, then ITERS times in one process (fp8_crash_loop.py) with GPU core dumps on
# exceptions, and read a dump with cuda-gdb.
# Usage on the device: COMMIT=<sha> OUT=<dir> [PROCS=0] [ITERS=60] [LIMIT=330] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_COREDUMP_FILE="$OUT/core.%p"
export CUDA_COREDUMP_GENERATION_FLAGS="skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory,skip_constbank_memory"
for r in $(seq 1 "${PROCS:-0}"); do
  f="$OUT/crash-proc$r-$COMMIT.txt"
  PYTHONPATH=src timeout 60 python3 benchmarks/experiments/fp8_crash_loop.py --iters 1 > "$f" 2>&1
  rc=$?; echo "process $r rc $rc"
  if [ $rc -ne 0 ]; then grep -v CUDAEvent "$f" | tail -3; break; fi
done
if ! ls "$OUT"/core.* > /dev/null 2>&1; then
  f="$OUT/crash-loop-$COMMIT.txt"
  PYTHONPATH=src timeout "${LIMIT:-330}" python3 benchmarks/experiments/fp8_crash_loop.py --iters "${ITERS:-60}" > "$f" 2>&1
  echo "loop rc $?"; grep -v CUDAEvent "$f" | tail -3
fi
core=$(ls "$OUT"/core.* 2>/dev/null | head -1)
if [ -n "$core" ]; then
  ls -la "$core"
  timeout 120 cuda-gdb -batch -ex "target cudacore $core" -ex "info cuda kernels" -ex "bt" -ex "x/6i \$pc-48" \
    -ex "info cuda warps" > "$OUT/core-read.txt" 2>&1
  head -70 "$OUT/core-read.txt"
fi
