#!/usr/bin/env bash
# One device call (edit per session). This one: host time per call (seven interleaved rounds, min and median),
# with the package's ops on a torch.library.Library against the same launcher behind a torch.library.custom_op.
# (At 31c4971 the same script also ran gpu tests through the public ops, 37 passed, and the demo on the GPU.)
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 benchmarks/host_overhead.py > "$OUT/host.txt" 2>&1
grep -E "^host|Error" "$OUT/host.txt"
