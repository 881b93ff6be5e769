#!/usr/bin/env bash
# One device call (edit per session). This one: the ops registered on a torch.library.Library and cached
# heuristics: host time per call, then gpu tests through the public ops (cache writes, prefill, decode with
# CUDA-graph replay and split sequences, sparse), then the demo on the GPU.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
timeout 100 python3 benchmarks/host_overhead.py > "$OUT/host.txt" 2>&1
grep -E "^host|Error" "$OUT/host.txt"
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rf tests/test_cache_write_triton.py \
  tests/test_prefill_triton.py tests/test_sparse_decode_triton.py tests/test_compile.py \
  "tests/test_decode_triton.py::test_gpu_cuda_graph_replay" "tests/test_decode_triton.py::test_gpu_partitions" \
  > "$OUT/gpu-tests.txt" 2>&1
tail -2 "$OUT/gpu-tests.txt"; grep -E "^FAILED" "$OUT/gpu-tests.txt" | head -10
timeout 90 python3 -m pagedmla.cli demo --quiet > "$OUT/demo.txt" 2>&1; tail -3 "$OUT/demo.txt"
