#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized kernel's tiles of several tokens' heads,
# final code: its gpu tests, 128 heads at batch 1 against BASE, the ws config against the Triton tiles where the
# heuristic now takes it (16 heads q2 at B1 / B16, 32 heads q1), and `bench mtp` with the new default.
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "(test_gpu_warp_specialized and (H16 or H32 or H8 or (H128-ps64-mtp and W7))) or takes_warp_specialized or waits_for" \
  > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
  rev=${tree%%:*}; path=${tree#*:}
  PYTHONPATH=$path timeout 60 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 4096 16384 \
    --kv-dtype bf16 --no-reference --commit "$rev" > "$OUT/ab-h128-b1-${rev:0:7}.txt" 2>&1
  echo "== ${rev:0:7} rc $?"; grep -E "^decode" "$OUT/ab-h128-b1-${rev:0:7}.txt" | sed 's/  */ /g' | cut -c1-80
done
PYTHONPATH=src timeout 150 python3 benchmarks/decode_probe.py --sweep --workers none --config 64,64,8,2,interior,ws \
  --case 1,4096,16,2 --case 16,4096,16,2 --case 64,4096,32,1 --case 1,16384,32,1 > "$OUT/probe-ws-small-$COMMIT.txt" 2>&1
echo "probe rc $?"; grep -E "W[0-9]+ " "$OUT/probe-ws-small-$COMMIT.txt" | cut -c1-120
PYTHONPATH=src timeout 100 python3 -m pagedmla.cli bench mtp --no-reference --commit "$COMMIT" \
  --json "$OUT/bench-mtp-$COMMIT.json" > "$OUT/bench-mtp-$COMMIT.txt" 2>&1
echo "== mtp rc $?"; grep -E "^ceilings|^mtp" "$OUT/bench-mtp-$COMMIT.txt" | sed 's/  */ /g' | cut -c1-100
