#!/usr/bin/env bash
# One device call (edit per session). This one: the warp-specialized decode's epilogue through TMA stores
# (COMMIT, branch tma-epilogue) against BASE (ab_base/, main before it): the gpu tests of the warp-specialized,
# split, graph and wait paths, then the harness at 128 heads (B1, B64, B128; MTP), alternating, two runs, then
# the stamped timeline of the new kernel. Carry ab_base (`git archive <sha> src | tar -x -C ab_base`).
# Usage on the device: COMMIT=<sha> BASE=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "warp_specialized or graph or split or waits_for" -x > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
rc=$?
echo "tests rc $rc"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
[ $rc -ne 0 ] && exit 1
f="$OUT/ab-tma-epilogue.txt"
for run in 1 2; do
  for tree in "$BASE:ab_base/src" "$COMMIT:src"; do
    rev=${tree%%:*}; path=${tree#*:}
    echo "== ${rev:0:7} run $run" >> "$f"
    PYTHONPATH=$path timeout 40 python3 -m pagedmla.cli bench decode --heads 128 --batch 64 128 --keys 4096 \
      --no-reference --commit "$rev" >> "$f" 2>&1
    PYTHONPATH=$path timeout 40 python3 -m pagedmla.cli bench decode --heads 128 --batch 1 --keys 16384 4096 \
      --no-reference --commit "$rev" >> "$f" 2>&1
    PYTHONPATH=$path timeout 40 python3 -m pagedmla.cli bench mtp --heads 128 --no-reference --commit "$rev" \
      >> "$f" 2>&1
  done
done
grep -E "^==|^(decode|mtp) " "$f" | cut -c1-100
PYTHONPATH=src timeout 60 python3 benchmarks/experiments/ws_timeline.py --case 1,16384,128,1 --case 64,4096,128,1 \
  --json "$OUT/ws-timeline-$COMMIT.json" > "$OUT/ws-timeline-$COMMIT.txt" 2>&1
grep -E "^case|  call|loop_end|exit_c|epilogue_us" "$OUT/ws-timeline-$COMMIT.txt" | head -24 | cut -c1-130
