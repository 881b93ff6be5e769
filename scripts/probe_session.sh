#!/usr/bin/env bash
# One device call of probes (edit per session): the prefill probe's sweep, then the whole gpu session
# (gpu tier, demo, benchmark suite) and the FP8-vs-bf16 dense and 16-head bf16 sparse benchmark rows.
# Full logs under $OUT. Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 benchmarks/prefill_probe.py --sweep --only prefill --json "$OUT/prefill.json" \
  > "$OUT/prefill.log" 2>&1
grep -v "^ \|^Traceback" "$OUT/prefill.log" | grep -v "^{" | tail -16
TEST_TIMEOUT=300 BENCH_TIMEOUT=260 bash scripts/gpu_session.sh all > "$OUT/session.log" 2>&1
grep -E "passed|failed|error" "$OUT/gpu-tests.log" | tail -3; tail -3 "$OUT/demo.log"
timeout 60 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 --kv-dtype bf16 fp8 \
  --no-reference --json "$OUT/fp8-dense.json" --commit "${COMMIT:-unknown}" > "$OUT/fp8-dense.txt" 2>&1
timeout 60 python3 -m pagedmla.cli bench sparse --heads 16 --kv-dtype bf16 --no-reference \
  --json "$OUT/sparse16.json" --commit "${COMMIT:-unknown}" > "$OUT/sparse16.txt" 2>&1
tail -12 "$OUT/bench.txt"; tail -8 "$OUT/fp8-dense.txt"; tail -5 "$OUT/sparse16.txt"
