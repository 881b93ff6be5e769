#!/usr/bin/env bash
# One device call (edit per session). This one, the session's last: the cache-write gpu tier (split tiles in any
# arrival order, poisoned workspace, repeated bits), the whole benchmark suite on main, then the k_matmul sweep
# (CUDA-graph timing, with TMA tiles at 256 rows).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"; } > "$OUT/env.txt"
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py \
  > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 330 python3 -m pagedmla.cli bench all --no-reference --commit "${COMMIT:-unknown}" --json "$OUT/bench-all.json" \
  2>"$OUT/bench-all.stderr" > "$OUT/bench-all.txt"
cat "$OUT/bench-all.txt" | cut -c1-150
timeout 100 python3 benchmarks/prefill_probe.py --only k_matmul --sweep --graph > "$OUT/k_matmul.txt" 2>&1
grep -E "^k_matmul (4096|256)|FAILED|Error" "$OUT/k_matmul.txt" | sed -E 's/MatmulToCacheConfig//; s/block_|num_|group_//g' | cut -c1-170
