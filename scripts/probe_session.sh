#!/usr/bin/env bash
# One device call (edit per session). Twenty-third session, last call: the register-operand 16-row FP8 kernel
# with its rows and partials stored as 16-byte vectors: its gpu tests (the ws16 cases on that kernel, and the
# automatic choice), the harness at 16 heads B64 / B128 N4096, then rs_timeline.py at B64.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16rs-$COMMIT.txt"
PYTHONPATH=src timeout 170 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_decode_triton.py \
  -k "ws16 and registers or automatic" > "$f" 2>&1
echo "tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -5
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 60 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -5 "$f"
PYTHONPATH=src:benchmarks timeout 40 python3 benchmarks/experiments/rs_timeline.py --case 64,4096 \
  --json "$OUT/rs-timeline-$COMMIT.json" 2>&1 | grep -v Warn | tee "$OUT/rs-timeline-$COMMIT.txt" | grep -E "case|merge|written|last_block_done"
