#!/usr/bin/env bash
# One device call (edit per session). This one: the decode gpu tests (new combine tiles) and the decode benchmark
# suite; the prefill probe with the heads-inner grid against the 2-D grid. Usage: COMMIT=<sha> OUT=<dir> bash ...
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 130 python3 benchmarks/prefill_probe.py --sweep --only prefill --json "$OUT/prefill-probe.json" \
  > "$OUT/prefill-probe.txt" 2>&1
timeout 90 python3 -m pagedmla.cli bench decode --no-reference --commit "${COMMIT:-unknown}" \
  --json "$OUT/decode.json" > "$OUT/decode.txt" 2>&1
timeout 200 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider -rf 2>&1 \
  | tee "$OUT/gpu-tests.log" | tail -4
grep -v "^\[" "$OUT/decode.txt" | tail -16
grep -i "prefill\|cudnn" "$OUT/prefill-probe.txt" | tail -24
