#!/usr/bin/env bash
# One device call (edit per session). This one: the whole gpu tier, the demo on the GPU, and the 16-head bf16
# sparse probe with combine-tile variants. Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "commit ${COMMIT:-unknown}"
} > "$OUT/env.txt" 2>&1
timeout 400 python3 -m pytest -q -m gpu tests -p no:cacheprovider -rf 2>&1 | tee "$OUT/gpu-tests.log" | tail -6
timeout 60 python3 -m pagedmla.cli demo --quiet 2>&1 | tee "$OUT/demo.log" | tail -3
timeout 90 python3 benchmarks/sparse_probe.py --out "$OUT" --sweep --cases H16-bf16kv --budget-s 60 \
  > "$OUT/sparse-probe.log" 2>&1
grep "H16" "$OUT/sparse_probe.txt" | head -20
