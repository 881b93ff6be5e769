#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 5: the register FP8 kernel with the piece's
# finisher being the consumer that had its last block: its gpu tests, the crash hunt (fp8_crash_loop.py), the
# combine's cost (rs_tail.py), the timeline (rs_timeline.py), then the harness at 16 heads twice.
# Usage on the device: COMMIT=<sha> OUT=<dir> [ITERS=150] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "${TESTS:-ws16 and (registers or automatic)}" > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_COREDUMP_FILE="$OUT/core.%p"
export CUDA_COREDUMP_GENERATION_FLAGS="skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory,skip_constbank_memory"
f="$OUT/crash-loop-$COMMIT.txt"
PYTHONPATH=src timeout 70 python3 benchmarks/experiments/fp8_crash_loop.py --iters "${ITERS:-150}" > "$f" 2>&1
echo "loop rc $?"; grep -v CUDAEvent "$f" | tail -2
core=$(ls "$OUT"/core.* 2>/dev/null | head -1)
if [ -n "$core" ]; then
  timeout 120 cuda-gdb -batch -ex "target cudacore $core" -ex "info cuda kernels" -ex "bt" -ex "x/40i \$pc-320" \
    -ex "info cuda warps" > "$OUT/core-read.txt" 2>&1
  head -40 "$OUT/core-read.txt"; rm -f "$core"
fi
unset CUDA_ENABLE_COREDUMP_ON_EXCEPTION
f="$OUT/rs-tail-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 90 python3 benchmarks/experiments/rs_tail.py --case 64,4096 --case 128,4096 \
  > "$f" 2>&1
echo "tail rc $?"; grep -v Warn "$f" | tail -6
f="$OUT/rs-timeline-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 60 python3 benchmarks/experiments/rs_timeline.py --case 64,4096 --workers 0 \
  > "$f" 2>&1
echo "timeline rc $?"; grep -E "last_block|merge|written|latest" "$f"
for run in 1 2; do
  f="$OUT/bench$run-decode-h16-$COMMIT.txt"
  PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
    --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
  echo "bench rc $?"; tail -5 "$f"
done
