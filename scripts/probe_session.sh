#!/usr/bin/env bash
# One device call (edit per session). This one: 64-row decode tiles with the logits' MMA split across the two
# warpgroups (split_logits + hide_from_dot_chain): the decode gpu tier, then the harness at 128 heads (decode
# B64/B128 x N4096/N8192, B1 N16384, MTP q2/q4).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 200 python3 -m pagedmla.cli bench decode --heads 128 --no-reference --json "$OUT/bench-decode.json" \
  > "$OUT/bench-decode.txt" 2>&1
timeout 120 python3 -m pagedmla.cli bench mtp --heads 128 --no-reference --json "$OUT/bench-mtp.json" \
  > "$OUT/bench-mtp.txt" 2>&1
grep -E "^ceilings|^case|^decode|^mtp" "$OUT/bench-decode.txt" "$OUT/bench-mtp.txt" | sed 's/^.*txt://' | cut -c1-150
