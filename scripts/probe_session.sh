#!/usr/bin/env bash
# One device call (edit per session). This one: the decode's combine launched as a programmatic dependent (PDL):
# gpu tests that split sequences and replay CUDA graphs, an on/off A/B per case, then the k_matmul sweep (graph
# timing) with the tail split halved and one-warpgroup tiles.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 170 python3 -m pytest -q -m gpu tests/test_decode_triton.py -p no:cacheprovider -rf \
  -k "cuda_graph or partitions or (deepseek_shapes and not fp8 and 16)" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 150 python3 benchmarks/decode_probe.py --pdl-ab --profile --case 64,4096,16,1 --case 128,4096,16,1 \
  --case 64,2048,16,1 --case 1,16384,16,1 --case 1,16384,128,1 --case 64,4096,128,1 > "$OUT/decode-pdl.txt" 2>&1
grep -E "^#|pdl-ab|profile|Error" "$OUT/decode-pdl.txt"
timeout 120 python3 benchmarks/prefill_probe.py --only k_matmul --sweep --graph > "$OUT/k_matmul.txt" 2>&1
grep -E "^k_matmul|FAILED|compiled|Error" "$OUT/k_matmul.txt" | sed -E 's/MatmulToCacheConfig//; s/block_|num_|group_//g'
