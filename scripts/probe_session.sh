#!/usr/bin/env bash
# One device call (edit per session). This one: the reworked Gluon sparse gpu tests (all -1 rows on both kernels,
# the ws graph replay), the 16-head ring at 128 workers (two pieces per sequence, one program per SM) with deeper
# rings, and per-kernel device times at batch 1, 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "gluon_all_minus_one or ws" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -20
timeout 200 python3 benchmarks/decode_probe.py --sweep --ring-plan --config 16,32,4,1,ring2 --config 16,32,4,1,ring3 \
  --config 16,32,4,1,ring4 --workers 128,256 --case 64,4096,16,1 > "$OUT/ring-workers128-$COMMIT.txt" 2>&1
echo "sweep rc $?"; grep -E "^ +B" "$OUT/ring-workers128-$COMMIT.txt" | cut -c1-150
timeout 100 python3 benchmarks/decode_probe.py --profile --case 1,16384,128,1 > "$OUT/profile-b1-$COMMIT.txt" 2>&1
echo "profile rc $?"; tail -12 "$OUT/profile-b1-$COMMIT.txt" | cut -c1-150
