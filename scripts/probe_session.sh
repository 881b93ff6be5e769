#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized sparse decode without spills (opaque slot
# indices): its gpu tests, the harness's FP8 sparse rows at 64 and 128 heads, then Nsight Compute's stall samples.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "ws" > "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-ws-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-sparse-ws-$COMMIT.txt" | head -20
timeout 120 python3 -m pagedmla.cli bench sparse --heads 128 64 --batch 64 128 --keys 32768 \
  --kv-dtype fp8 --no-reference --commit "$COMMIT" --json "$OUT/bench-sparse-fp8-$COMMIT.json" \
  > "$OUT/bench-sparse-fp8-$COMMIT.txt" 2>&1
echo "bench rc $?"; grep -E "sparse|ceiling" "$OUT/bench-sparse-fp8-$COMMIT.txt" | cut -c1-150
NCU=/usr/local/cuda/bin/ncu
timeout 150 $NCU --clock-control none -k regex:_mla_sparse_decode_ws_kernel --launch-skip 1 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o /tmp/sws -f \
  python3 scripts/ncu_sparse.py 64,2,128,2048 > "$OUT/ncu-sws-run.txt" 2>&1
echo "ncu rc $?"
timeout 60 $NCU -i /tmp/sws.ncu-rep --page source --csv --print-source sass > "$OUT/ncu-sws-sass-$COMMIT.csv" 2>&1
echo "export rc $?"
