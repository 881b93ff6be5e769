#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 7: fp16 split partials with each row's LSE
# and scale exponents in one record: gpu tests, fp16 against float32 partials in one process, the harness at
# batch 1 (128 heads).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/ws-partials-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/ws_start.py --case 1,16384,128 \
  --case 1,4096,128 --case 64,4096,128 --repeat 3 --partials half float --combines shipped > "$f" 2>&1
echo "ws_start rc $?"; grep -v "^$" "$f" | sort | tail -20
f="$OUT/bench-decode-h128-b1-$COMMIT.txt"
PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 16384 4096 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; grep -E "^ceilings" "$f"; tail -3 "$f"
f="$OUT/gpu-tests-ws-$COMMIT.txt"
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider \
  -k "half_partials or warp_specialized or deepseek_shapes or cuda_graph_replay or waits_for or partitions" \
  > "$f" 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error|assert" "$f" | tail -15
