#!/usr/bin/env bash
# One device call (edit per session). Twenty-sixth session, call 4: the 64-row kernel with q's copies first
# (gpu tests, then the harness at 128 heads), and the register FP8 kernel letting the combine launch near its end
# (rs_ablate.py trigger-end / trigger-merge at the plan heuristic's workers).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws-$COMMIT.txt"
PYTHONPATH=src timeout 240 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "warp_specialized or deepseek_shapes or cuda_graph_replay or waits_for or partitions" > "$f" 2>&1
echo "ws tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
f="$OUT/rs-ablate-trigger-w128-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 200 python3 benchmarks/experiments/rs_ablate.py --case 64,4096 --case 128,4096 \
  --only base,trigger-end,trigger-merge --workers 0 --repeat 4 > "$f" 2>&1
echo "ablate rc $?"; grep -v Warn "$f" | tail -24
f="$OUT/bench-decode-h128-$COMMIT.txt"
PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 16384 4096 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -6 "$f"
f="$OUT/bench-decode-h128-b64-$COMMIT.txt"
PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench decode --heads 128 --batch 64 --keys 4096 \
  --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -4 "$f"
