#!/usr/bin/env bash
# One device call (edit per session). Twenty-eighth session, call 9: issue 4's whole table with the harness at
# one commit (the kernels of e7275a6 / 84979b2): dense decode at 16 and 128 heads, B64 / B128 x N4096 / N8192,
# batch 1 at N16384, MTP 2 and 4 tokens at 128 heads.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
run() {  # name, then the bench arguments
  local name=$1; shift
  PYTHONPATH=src timeout 240 python3 -m pagedmla.cli bench "$@" --no-reference --commit "$COMMIT" \
    --json "$OUT/bench-$name-$COMMIT.json" > "$OUT/bench-$name-$COMMIT.txt" 2>&1
  echo "bench $name rc $?"
}
run decode-b64-b128 decode --heads 16 128 --batch 64 128 --keys 4096 8192
run decode-b1 decode --heads 16 128 --batch 1 --keys 16384
run mtp mtp --heads 128 --batch 64 --keys 4096 --query-tokens 2 4
for f in "$OUT"/bench-*.txt; do echo "== $f"; grep -E "^ceilings|^decode|^mtp|^case|commit" "$f" | head -20; done
