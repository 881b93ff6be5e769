#!/usr/bin/env bash
# One device call: environment, the gpu test tier, then the benchmark suite; full logs under $OUT,
# a short table last. Usage on the device: bash scripts/gpu_session.sh [bench args...]
set -uo pipefail
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git rev-parse --short HEAD 2>/dev/null || true
} 2>&1 | tee "$OUT/env.txt"
python3 -m pytest -q -m gpu tests -p no:cacheprovider --timeout=900 2>&1 | tee "$OUT/gpu-tests.log" | tail -25
python3 -m pagedmla.cli bench "${@:-all}" --json "$OUT/results.json" --csv "$OUT/results.csv" \
  --plot "$OUT/roofline.png" --commit "${COMMIT:-unknown}" 2>"$OUT/bench.stderr" | tee "$OUT/bench.txt"
