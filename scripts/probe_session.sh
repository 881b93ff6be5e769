#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized Gluon prefill wired in (Hopper, bf16, null and
# causal masks): its own gpu test first (60 s cap: a hang stops the call), then the prefill gpu tier, then the
# harness's prefill suite twice (the output through a TMA store for whole 64-row halves).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py -k warp_specialized \
  > "$OUT/gpu-tests-ws-$COMMIT.txt" 2>&1
rc=$?; tail -3 "$OUT/gpu-tests-ws-$COMMIT.txt"; [ $rc -eq 0 ] || { grep -E "Error|assert" "$OUT/gpu-tests-ws-$COMMIT.txt" | head -20; exit 1; }
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py > "$OUT/gpu-tests-prefill-$COMMIT.txt" 2>&1
tail -2 "$OUT/gpu-tests-prefill-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-prefill-$COMMIT.txt" | head -10
for run in 1 2; do
  timeout 200 python3 -m pagedmla.cli bench prefill --no-reference --commit "$COMMIT" \
    --json "$OUT/bench-prefill-$COMMIT-$run.json" > "$OUT/bench-prefill-$COMMIT-$run.txt" 2>&1
  grep -E "^ceilings|^prefill" "$OUT/bench-prefill-$COMMIT-$run.txt" | cut -c1-112
done
