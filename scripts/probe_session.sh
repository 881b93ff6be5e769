#!/usr/bin/env bash
# One device call (edit per session). This one: the dense decode kernels (ring, warp-specialized, Triton) and the
# combine launched as programmatic dependents (PDL: each waits for the previous kernel at its start): the dense
# decode gpu tier, then the harness at 16 and 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py -x \
  > "$OUT/gpu-tests-decode-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-decode-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-decode-$COMMIT.txt" | head -20
timeout 240 python3 -m pagedmla.cli bench decode --heads 16 128 --batch 1 64 128 --keys 4096 16384 --kv-dtype bf16 \
  --no-reference --commit "$COMMIT" --json "$OUT/bench-decode-$COMMIT.json" > "$OUT/bench-decode-$COMMIT.txt" 2>&1
echo "bench rc $?"; tail -16 "$OUT/bench-decode-$COMMIT.txt"
