#!/usr/bin/env bash
# One device call (edit per session). This one: diagnostic variants of the dense ring (1: no row or key-lo mask;
# 2: and no sequence loop) against the sparse ring on the same rows.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 benchmarks/experiments/ring_pattern_ab.py > "$OUT/ring-ab-diag-$COMMIT.txt" 2>&1
echo "ab rc $?"; cat "$OUT/ring-ab-diag-$COMMIT.txt" | tail -9
