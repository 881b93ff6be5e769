#!/usr/bin/env bash
# One device call (edit per session). Twenty-fourth session, call 3: the harness's FP8-only run at 16 heads
# (B64 then B128, N4096) failed once with "unspecified launch failure" in call 2 (the shipped kernel's code).
# Repeat it up to RUNS times with GPU core dumps on exceptions, stop at the first failure, and read the dump
# with cuda-gdb when the device has it.
# Usage on the device: COMMIT=<sha> OUT=<dir> [RUNS=4] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
echo "tools: $(command -v cuda-gdb compute-sanitizer | tr '\n' ' ')"; ls -d /usr/local/cuda* 2>/dev/null | head -3
export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_COREDUMP_FILE="$OUT/core.%p"
export CUDA_COREDUMP_GENERATION_FLAGS="skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory,skip_constbank_memory"
for r in $(seq 1 "${RUNS:-4}"); do
  f="$OUT/crash-fp8-run$r-$COMMIT.txt"
  PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
    --kv-dtype fp8 --no-reference > "$f" 2>&1
  rc=$?
  echo "run $r rc $rc: $(grep -E 'decode B' "$f" | grep -v '^\[' | awk '{print $2, $NF, $7}' | tr '\n' ';')"
  if [ $rc -ne 0 ]; then grep -v CUDAEvent "$f" | grep -E "Error|error" | head -4; break; fi
done
ls -la "$OUT"
core=$(ls "$OUT"/core.* 2>/dev/null | head -1)
if [ -n "$core" ] && command -v cuda-gdb > /dev/null; then
  timeout 120 cuda-gdb -batch -ex "target cudacore $core" -ex "info cuda kernels" -ex "bt" -ex "x/6i \$pc-48" \
    -ex "info cuda warps" > "$OUT/core-read.txt" 2>&1
  head -60 "$OUT/core-read.txt"
fi
