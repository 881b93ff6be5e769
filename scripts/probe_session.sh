#!/usr/bin/env bash
# One device call (edit per session). This one, the session's last: the test of the decode kernels waiting for
# the kernel before them (programmatic dependent launches) and the CUDA-graph replay tests, then the harness rows
# of the targets table (dense decode bf16 and FP8, MTP, sparse).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "waits_for or cuda_graph" > "$OUT/gpu-tests-final-$COMMIT.txt" 2>&1
echo "tests rc $?"; tail -1 "$OUT/gpu-tests-final-$COMMIT.txt"; grep -E "^FAILED|^E  " "$OUT/gpu-tests-final-$COMMIT.txt" | head -20
bench() {  # name, then bench arguments
  local name=$1; shift
  timeout 150 python3 -m pagedmla.cli bench "$@" --no-reference --commit "$COMMIT" \
    --json "$OUT/bench-$name-$COMMIT.json" > "$OUT/bench-$name-$COMMIT.txt" 2>&1
  echo "== $name rc $?"; grep -E "^ceilings|^(decode|mtp|sparse) " "$OUT/bench-$name-$COMMIT.txt" \
    | awk '{ if ($1 == "ceilings:") print; else { n = NF; printf "%s %s %s %s %s", $1, $2, $3, $4, $5; for (i = 6; i <= n; i++) if ($i ~ /^[0-9.]+$/ || $i ~ /%$/) printf " %s", $i; print "" } }'
}
bench decode decode --heads 16 128 --kv-dtype bf16
bench decode-b64-n8192 decode --heads 16 128 --batch 64 --keys 8192 --kv-dtype bf16
bench decode-fp8 decode --heads 16 --batch 64 128 --keys 4096 --kv-dtype fp8
bench mtp mtp
bench sparse-fp8 sparse --heads 128 64 --batch 64 128 --keys 32768 --kv-dtype fp8
bench sparse-h16 sparse --heads 16 --batch 64 128 --kv-dtype bf16
