#!/usr/bin/env bash
# One device call (edit per session): the gpu tier of the decode and prefill kernels, then the decode and
# prefill benchmark suites and the FP8-vs-bf16 dense decode rows. Full logs under $OUT.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu tests/test_decode_triton.py tests/test_prefill_triton.py \
  -p no:cacheprovider -rf 2>&1 | tee "$OUT/gpu-tests.log" | tail -4
B="python3 -m pagedmla.cli bench"
timeout 70 $B decode --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
timeout 70 $B prefill --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/prefill.json" > "$OUT/prefill.txt" 2>&1
timeout 40 $B decode --heads 16 --batch 64 128 --keys 4096 --kv-dtype bf16 fp8 --no-reference \
  --commit "${COMMIT:-unknown}" --json "$OUT/fp8-dense.json" > "$OUT/fp8-dense.txt" 2>&1
tail -14 "$OUT/decode.txt"; tail -11 "$OUT/prefill.txt"; tail -6 "$OUT/fp8-dense.txt"
