#!/usr/bin/env bash
# One device call (edit per session). This one: two programs per SM for big rope-aware FP8 batches at 16 heads
# (plan workers x2, 4-warp tile): the decode gpu tests that cover it, then the harness's 16-head decode, bf16 and
# FP8, B64/B128 x N4096/N8192 (FP8 against bf16 in the same run).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "two_programs or launch_variants or rope_aware or partitions or cuda_graph or fp8_cache_deepseek" \
  > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 250 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 8192 --kv-dtype bf16 fp8 \
  --no-reference --json "$OUT/bench-decode.json" > "$OUT/bench-decode.txt" 2>&1
tail -14 "$OUT/bench-decode.txt" | cut -c1-160
