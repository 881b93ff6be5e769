#!/usr/bin/env bash
# One device call (edit per session). This one: the session's last code, COMMIT. The gpu tests of the kernels
# whose partial stores changed (the ring, warp-specialized, split, graph and wait tests of the dense decode; the
# sparse ring and split tests: the selection that passed with the hints at 908da8a), then the harness rows of
# the targets (BENCHMARKS.md "Against the targets"). Text into one file, JSON rows merged into one file (a call
# returns at most 8 files).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
PYTHONPATH=src timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "test_gpu_ring or test_gpu_warp_specialized or split or graph or waits_for" \
  > "$OUT/gpu-tests-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-$COMMIT.txt" | head -12
PYTHONPATH=src timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  -k "sparse_ring_matches or split" > "$OUT/gpu-tests-sparse-$COMMIT.txt" 2>&1
echo "sparse tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-$COMMIT.txt"
J=/tmp/bench-json; mkdir -p $J
bench() {  # name, then the harness's arguments
  local name=$1; shift
  PYTHONPATH=src timeout 120 python3 -m pagedmla.cli bench "$@" --no-reference --commit "$COMMIT" \
    --json "$J/$name.json" >> "$OUT/bench-$COMMIT.txt" 2>&1
  echo "== $name rc $?"
}
bench decode decode --heads 16 128 --kv-dtype bf16
bench decode-n8192 decode --heads 16 128 --batch 64 --keys 8192
bench decode-fp8 decode --heads 16 --batch 64 128 --keys 4096 --kv-dtype fp8
bench mtp mtp
bench sparse-fp8 sparse --heads 128 64 --batch 64 128 --keys 32768 --kv-dtype fp8
bench sparse-bf16 sparse --heads 16 --batch 64 128 --kv-dtype bf16
python3 - "$J" "$OUT/bench-$COMMIT.json" <<'PY'
import json, pathlib, sys
rows = {p.stem: json.loads(p.read_text()) for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json"))}
pathlib.Path(sys.argv[2]).write_text(json.dumps(rows, indent=1))
PY
grep -E "^ceilings|^(decode|mtp|sparse) " "$OUT/bench-$COMMIT.txt" | cut -c1-110
