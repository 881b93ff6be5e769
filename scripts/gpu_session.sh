#!/usr/bin/env bash
# One device call: environment, the gpu test tier, the demo on the GPU, then the benchmark suite.
# Full logs go under $OUT; the benchmark table prints last. Usage on the device (from the repo root):
#   COMMIT=<rev> OUT=<dir> bash scripts/gpu_session.sh [bench args...]
set -uo pipefail
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "commit ${COMMIT:-unknown}"
} 2>&1 | tee "$OUT/env.txt"
timeout "${TEST_TIMEOUT:-200}" python3 -m pytest -q -m gpu tests -p no:cacheprovider -rf 2>&1 \
  | tee "$OUT/gpu-tests.log" | tail -15
timeout "${DEMO_TIMEOUT:-60}" python3 -m pagedmla.cli demo --quiet 2>&1 | tee "$OUT/demo.log" | tail -4
timeout "${BENCH_TIMEOUT:-240}" python3 -m pagedmla.cli bench "${@:-all}" --no-reference \
  --json "$OUT/results.json" --csv "$OUT/results.csv" --plot "$OUT/roofline.png" --commit "${COMMIT:-unknown}" \
  2>"$OUT/bench.stderr" | tee "$OUT/bench.txt"
