#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 6: the 64-row kernel's epilogue bounds at batch 1
# (ws_start.py --epilogue), then the harness's 128-head decode rows (B64 / B128, N4096 / N8192) and MTP, with q's
# copies issued first (bf81d65's kernel).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-epilogue-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 150 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --combines shipped --epilogue no-stage no-tma-store --repeat 2 > "$f" 2>&1
echo "epilogue rc $?"; grep -v Warn "$f" | tail -12
f="$OUT/bench-decode-h128-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -m pagedmla.cli bench decode --heads 128 --batch 64 128 --keys 4096 8192 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -6 "$f"
f="$OUT/bench-mtp-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -m pagedmla.cli bench mtp --no-reference > "$f" 2>&1
echo "mtp rc $?"; tail -8 "$f"
