#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 10: the harness's 16-head bf16 / FP8 rows at B64
# and B128 N4096, three more runs of the final kernels (more samples of the FP8 / bf16 ratio, which is within
# run-to-run spread of 1.5x at B64).
# Usage on the device: COMMIT=<sha> OUT=<dir> [RUNS=3] bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
for run in $(seq 1 "${RUNS:-3}"); do
  f="$OUT/bench$run-decode-h16-$COMMIT.txt"
  PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
    --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
  echo "bench rc $?"; grep -E "^ceilings" "$f"; tail -4 "$f"
done
