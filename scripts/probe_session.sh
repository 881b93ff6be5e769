#!/usr/bin/env bash
# One device call (edit per session). This one: the dense combine's tiles and its programmatic dependent launch
# (schedule and offsets read before the wait) at 16 heads, whole-call graph times in one process; then the
# harness at 16 heads (bf16).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring_depths or ring_cuda_graph or ring_plan or combine" > "$OUT/gpu-tests-combine-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-combine-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-combine-$COMMIT.txt" | head -20
timeout 200 python3 benchmarks/decode_probe.py --case 64,4096,16,1 --case 128,4096,16,1 --profile \
  --combine default,0 --combine default,1 --combine 4,4,512,4,0 --combine 4,4,512,4,1 --combine 4,2,512,4,1 \
  --combine 4,1,512,2,1 --combine 8,2,512,4,1 --combine 4,4,256,4,1 > "$OUT/combine-probe-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|combine|^\|" "$OUT/combine-probe-$COMMIT.txt" | grep -v "^# _mla" | head -40
timeout 200 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 8192 --kv-dtype bf16 \
  --no-reference --commit "$COMMIT" --json "$OUT/bench-decode-h16-$COMMIT.json" > "$OUT/bench-decode-h16-$COMMIT.txt" 2>&1
echo "bench rc $?"; tail -12 "$OUT/bench-decode-h16-$COMMIT.txt"
