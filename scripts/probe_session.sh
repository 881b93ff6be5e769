#!/usr/bin/env bash
# One device call (edit per session). This one (session 4, last): the decode gpu tests, then `bench decode` and
# `bench mtp` for BENCHMARKS.md, after the plan (tail cost, exact spans) and interior-loop changes.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "commit ${COMMIT:-unknown}"; } 2>&1 | tee "$OUT/env.txt"
timeout 300 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider \
  -rf > "$OUT/gpu-tests-decode.log" 2>&1; echo "tests rc=$?"; tail -3 "$OUT/gpu-tests-decode.log"
timeout 140 python3 -m pagedmla.cli bench decode --no-reference --commit "${COMMIT:-unknown}" \
  --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
timeout 80 python3 -m pagedmla.cli bench mtp --no-reference --commit "${COMMIT:-unknown}" \
  --json "$OUT/mtp.json" > "$OUT/mtp.txt" 2>&1
grep -v "^\[" "$OUT/decode.txt" | tail -16; grep -v "^\[" "$OUT/mtp.txt" | tail -8
