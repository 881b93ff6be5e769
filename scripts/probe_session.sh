#!/usr/bin/env bash
# One device call (edit per session). This one: the op registration's kernel wrapper (no autograd, version bumps):
# gpu tests through the public ops (decode CUDA-graph replay and partitions, cache writes, prefill at page size 64,
# torch.compile), then host time per call.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py tests/test_compile.py \
  "tests/test_decode_triton.py::test_gpu_cuda_graph_replay" "tests/test_decode_triton.py::test_gpu_partitions" \
  "tests/test_prefill_triton.py::test_gpu_mla_prefill_deepseek" > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 60 python3 benchmarks/host_overhead.py > "$OUT/host.txt" 2>&1
grep -E "^host|Error" "$OUT/host.txt"
