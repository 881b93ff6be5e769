#!/usr/bin/env bash
# One device call (edit per session). This one, the final code after review (stream-K slots per group, smaller
# workspace, wider-output gate): the cache-write gpu tier, then the harness's cache-write suite at 4096 and
# 16384 rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 120 python3 -m pagedmla.cli bench cache-write --batch 1 --keys 4096 16384 --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-cache-write.json" > "$OUT/bench-cache-write.txt" 2>&1
grep -E "^ceilings|^cache-write" "$OUT/bench-cache-write.txt" | cut -c1-130
