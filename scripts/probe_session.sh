#!/usr/bin/env bash
# One device call (edit per session). This one: host time per call of the ops (benchmarks/host_overhead.py, with
# a cProfile of the public k_matmul), then the harness's cache-write suite (k_matmul against torch.matmul,
# CUDA-graph timing) twice, for the run-to-run spread.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 benchmarks/host_overhead.py --profile > "$OUT/host.txt" 2>&1
grep -E "^host|Error" "$OUT/host.txt"; grep -A24 "Ordered by" "$OUT/host.txt" | cut -c1-150
for run in 1 2; do
  timeout 150 python3 -m pagedmla.cli bench cache-write --no-reference --commit "${COMMIT:-unknown}" \
    --json "$OUT/cache-write-$run.json" 2>"$OUT/cache-write-$run.stderr" | tee "$OUT/cache-write-$run.txt" | tail -8
done
