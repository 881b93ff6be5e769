#!/usr/bin/env bash
# One device call (edit per session). This one: a quarter of the prefill's unmasked exponentials on the FMA pipe
# (PrefillConfig.poly_exp2): its gpu tests, then the prefill probe alternating the heuristic's config without and
# with it (twice each) against cuDNN.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py \
  -k "poly or exp2_mixed or (deepseek and ps64)" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests.txt" | head -10
timeout 240 python3 benchmarks/prefill_probe.py --only prefill --config default --config default-poly \
  --config default --config default-poly > "$OUT/prefill-poly.txt" 2>&1
grep -E "^prefill|FAILED|compiled" "$OUT/prefill-poly.txt" | cut -c1-150
