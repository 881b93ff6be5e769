#!/usr/bin/env bash
# One device call of probes (edit per session): gpu tests of the touched kernels, then the decode and sparse
# sweeps. Full logs under $OUT. Usage on the device: OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 150 python3 -m pytest -q -m gpu tests/test_decode_triton.py tests/test_sparse_decode_triton.py \
  -k "fp8 or e4m3 or launch_variants or sparse" -p no:cacheprovider -rf 2>&1 | tee "$OUT/gpu-tests.log" | tail -6
D="timeout 110 python3 benchmarks/decode_probe.py --sweep"
$D --case 64,4096,16,1 --case 64,4096,16,1,fp8 --case 128,4096,16,1,fp8 --config 16,64,8,3 --config 16,64,8,2 \
  --config 16,32,4,3 --config 16,32,4,4 --workers 256 --json "$OUT/d16.json" > "$OUT/d16.txt" 2>&1
grep "^|" "$OUT/d16.txt"
$D --case 64,4096,128,1,fp8 --config 64,32,8,3 --config 64,64,8,2 --json "$OUT/d128.json" > "$OUT/d128.txt" 2>&1
grep "^|" "$OUT/d128.txt"
timeout 150 python3 benchmarks/sparse_probe.py --sweep --budget-s 100 --out "$OUT" > "$OUT/sparse.log" 2>&1
grep -v "^{" "$OUT/sparse.log" | tail -26
