#!/usr/bin/env bash
# One device call (edit per session). This one, the session's last: gpu tests of the final code (decode: the ring,
# graphs, partitions; sparse: the ring and the folded calls it now takes), then the folded 16-head sparse probe
# (q2: the ring unfolded against the folded Triton tiles; q4 for the record).
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ring or graph or partitions or two_programs" > "$OUT/gpu-tests-decode-final-$COMMIT.txt" 2>&1
echo "decode tests rc $?"; tail -1 "$OUT/gpu-tests-decode-final-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-decode-final-$COMMIT.txt" | head
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_sparse_decode_triton.py \
  > "$OUT/gpu-tests-sparse-final-$COMMIT.txt" 2>&1
echo "sparse tests rc $?"; tail -1 "$OUT/gpu-tests-sparse-final-$COMMIT.txt"; grep -E "^FAILED|Error" "$OUT/gpu-tests-sparse-final-$COMMIT.txt" | head
timeout 90 python3 benchmarks/sparse_probe.py --cases H16-bf16kv-fold --sweep --budget-s 40 --out "$OUT" \
  > "$OUT/sparse-fold-q2-$COMMIT.txt" 2>&1
echo "fold q2 rc $?"; grep -E "H16" "$OUT/sparse-fold-q2-$COMMIT.txt" | cut -c1-150 | head -12
timeout 90 python3 benchmarks/sparse_probe.py --cases H16-bf16kv-fold --query-tokens 4 --sweep --budget-s 40 \
  --out "$OUT" > "$OUT/sparse-fold-q4-$COMMIT.txt" 2>&1
echo "fold q4 rc $?"; grep -E "H16" "$OUT/sparse-fold-q4-$COMMIT.txt" | cut -c1-150 | head -12
