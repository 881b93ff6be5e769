#!/usr/bin/env bash
# One device call (edit per session). This one: the Gluon warp-specialized prefill prototype
# (benchmarks/experiments/gluon_prefill.py): a small check against float32, then the four prefill shapes against
# cuDNN (graph-timed).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 220 python3 benchmarks/experiments/gluon_prefill.py > "$OUT/gluon-prefill-$COMMIT.txt" 2>&1
echo "rc $?"
tail -25 "$OUT/gluon-prefill-$COMMIT.txt" | cut -c1-400
