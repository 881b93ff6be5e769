#!/usr/bin/env bash
# One device call (edit per session). This one: the ring kernel on the rope-aware FP8 cache (bf16 q; its latent
# MMAs in fp16 with q scaled by a power of two, the e4m3 tile widened by native conversions): the whole
# sparse gpu tier, the harness's 16-head rows (bf16 and FP8, B64 and B128), then sparse_probe's 16-head FP8
# sweep (Triton tile against ring depths).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -2 "$OUT/gpu-tests-sparse-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-$COMMIT.txt" | head -20
timeout 150 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 fp8 --batch 64 128 --no-reference \
  --commit "$COMMIT" --json "$OUT/bench-sparse-h16-fp8-$COMMIT.json" > "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "^ceilings|^sparse" "$OUT/bench-sparse-h16-fp8-$COMMIT.txt" | cut -c1-160
timeout 120 python3 benchmarks/sparse_probe.py --out "$OUT" --cases H16-rope-fp8kv --sweep > "$OUT/sparse-ring-fp8-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -v "^{" "$OUT/sparse-ring-fp8-$COMMIT.txt" | tail -8
