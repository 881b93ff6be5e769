#!/usr/bin/env bash
# One device call (edit per session). This one, after review: the warp-specialized prefill's gpu tests (60 s cap:
# a hang stops the call), then the whole prefill gpu tier.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py -k warp_specialized \
  > "$OUT/gpu-tests-ws-$COMMIT.txt" 2>&1
rc=$?; tail -3 "$OUT/gpu-tests-ws-$COMMIT.txt"; [ $rc -eq 0 ] || { grep -E "Error|assert" "$OUT/gpu-tests-ws-$COMMIT.txt" | head -20; exit 1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_prefill_triton.py > "$OUT/gpu-tests-prefill-$COMMIT.txt" 2>&1
tail -2 "$OUT/gpu-tests-prefill-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-prefill-$COMMIT.txt" | head -10
