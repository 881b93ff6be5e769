#!/usr/bin/env bash
# One device call (edit per session). Twenty-seventh session, call 12: the combine heuristic's second tile of
# pieces (64 + 4 at 67 pieces, 32 + 2 at 34): the harness at batch 1 (128 and 16 heads), then the gpu tests of
# the split decode paths.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/bench-decode-b1-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -m pagedmla.cli bench decode --heads 128 16 --batch 1 --keys 16384 4096 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; grep -E "^ceilings" "$f"; tail -5 "$f"
f="$OUT/gpu-tests-split-$COMMIT.txt"
PYTHONPATH=src timeout 300 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider -x \
  -k "warp_specialized or deepseek_shapes or cuda_graph_replay or partitions or combine or ws16" > "$f" 2>&1
echo "tests rc $?"; grep -E "passed|failed|Error" "$f" | tail -8
