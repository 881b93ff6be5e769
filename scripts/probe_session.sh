#!/usr/bin/env bash
# One device call (edit per session). This one: host time per call of the ops (benchmarks/host_overhead.py),
# with the k_matmul launcher behind a torch.library.Library op and with its config given, for comparison.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 120 python3 benchmarks/host_overhead.py > "$OUT/host.txt" 2>&1
grep -E "^host|Error" "$OUT/host.txt"
