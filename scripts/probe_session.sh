#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized kernel with tiles of several tokens' heads
# (16, 32, 8 heads) against the reference, a sample of its 128-head tests, then its speed at 16 heads (q1, q2,
# q4; explicit ws config, 128 / 132 workers) against the default, and an A/B of 128 heads against BASE.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "test_gpu_warp_specialized and (H16 or H32 or H8 or (H128-ps64-mtp and W7))" > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
PYTHONPATH=src timeout 200 python3 benchmarks/decode_probe.py --sweep --workers 128,132 --config 64,64,8,2,interior,ws \
  --case 64,4096,16,1 --case 64,4096,16,2 --case 64,4096,16,4 --case 128,4096,16,2 > "$OUT/probe-ws16-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "^#|W[0-9]+ " "$OUT/probe-ws16-$COMMIT.txt" | grep -v "_mla_decode" | cut -c1-140
for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
  rev=${tree%%:*}; path=${tree#*:}
  PYTHONPATH=$path timeout 90 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 64 --keys 4096 16384 \
    --kv-dtype bf16 --no-reference --commit "$rev" > "$OUT/ab-h128-${rev:0:7}.txt" 2>&1
  echo "== ${rev:0:7} rc $?"; grep -E "^decode" "$OUT/ab-h128-${rev:0:7}.txt" | sed 's/  */ /g' | cut -c1-80
done
