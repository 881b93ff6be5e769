#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row FP8 kernel switched off (WS16_ENABLED): the dense
# decode's ring and FP8 gpu tests and the harness at 16 heads on the paths that now run; then
# benchmarks/experiments/ws16_stress.py on the kernel with ws16_proxy_fence.patch applied (a copy of the tree).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-fp8-ring-$COMMIT.txt"
PYTHONPATH=src timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "(ring or fp8) and not ws16" > "$f" 2>&1
echo "ring/fp8 tests rc $?"; tail -1 "$f"; grep -E "^FAILED" "$f" | head -12
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 100 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" --json "$OUT/bench-decode-h16-$COMMIT.json" > "$f" 2>&1
echo "bench rc $?"
PYTHONPATH=src timeout 60 python3 -m pagedmla.cli bench decode --heads 16 --batch 1 --keys 16384 \
  --kv-dtype bf16 fp8 --no-reference --commit "$COMMIT" >> "$f" 2>&1
echo "bench b1 rc $?"; grep -vE "^\s*$" "$f" | cut -c1-150 | tail -14
exp=$(mktemp -d); cp -r . "$exp/"; cd "$exp"
patch -p1 -s < benchmarks/experiments/ws16_proxy_fence.patch && echo "patched"
PYTHONPATH=src timeout 100 python3 benchmarks/experiments/ws16_stress.py --reps 3 > "$OUT/stress-fence-$COMMIT.txt" 2>&1
echo "stress fence rc $?"; grep -E "over|worst|Error" "$OUT/stress-fence-$COMMIT.txt" | head -12
