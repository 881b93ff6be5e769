#!/usr/bin/env bash
# One device call (edit per session). This one, k_matmul's heuristic with tail_in_main (4 warps, 5 stages, from
# 3072 rows below stream-K): the cache-write gpu tier, then the harness's cache-write suite at 3072, 4096, 8192
# and 16384 rows, twice.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 -c "import torch; p = torch.cuda.get_device_properties(0); print('smem optin', p.shared_memory_per_block_optin)"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
tail -2 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED" "$OUT/gpu-tests-$COMMIT.txt" | head -10
for run in 1 2; do
  timeout 150 python3 -m pagedmla.cli bench cache-write --batch 1 --keys 3072 4096 8192 16384 --no-reference \
    --commit "$COMMIT" --json "$OUT/bench-cache-write-$COMMIT-$run.json" > "$OUT/bench-cache-write-$COMMIT-$run.txt" 2>&1
  grep -E "^ceilings|^cache-write|k_matmul" "$OUT/bench-cache-write-$COMMIT-$run.txt" | cut -c1-130
done
