#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row warp-specialized FP8 decode (`kernels.mla_decode_ws16`)
# as the shipped path for the rope-aware FP8 cache: the whole dense decode gpu tier and the fuzz tier's dense
# cases, then the harness at 16 heads (bf16 and FP8; B64, B128 N4096; B1 N16384).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  tests/test_fuzz_triton.py -k "not chunked_prefill" > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
rc=$?
echo "tests rc $rc"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -20
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 100 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" --json "$OUT/bench-decode-h16-$COMMIT.json" > "$f" 2>&1
echo "bench rc $?"
PYTHONPATH=src timeout 60 python3 -m pagedmla.cli bench decode --heads 16 --batch 1 --keys 16384 \
  --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" >> "$f" 2>&1
echo "bench b1 rc $?"
grep -vE "^\s*$" "$f" | cut -c1-150 | tail -24
