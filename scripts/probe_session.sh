#!/usr/bin/env bash
# One device call (edit per session). This one: the projection GEMM with K-split and tail tiles (gpu tier of the
# cache writes, then k_matmul (CUDA-graph timing) at 4096/1024/256/64 rows against torch.matmul, heuristic and sweep).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
# gpu tier passed at b377965 (10 passed)
# timeout 150 python3 -m pytest -q -m gpu tests/test_cache_write_triton.py -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1
# tail -3 "$OUT/gpu-tests.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests.txt" | head -10
timeout 200 python3 benchmarks/prefill_probe.py --only k_matmul --sweep --graph > "$OUT/k_matmul.txt" 2>&1
grep -E "^k_matmul|FAILED|compiled|Error" "$OUT/k_matmul.txt" | sed -E 's/MatmulToCacheConfig//; s/block_|num_|group_//g'
