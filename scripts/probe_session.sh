#!/usr/bin/env bash
# One device call (edit per session). This one: the 16-row FP8 decode with one W allocation per chunk (fewer
# (`kernels.mla_decode_ws16`, WS16_F16): its gpu tests with the knob on, then both variants timed in one process
# (B64 and B128 N4096, B1 N16384) and the fp16 variant's timeline.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-$COMMIT.txt"
PYTHONPATH=src timeout 240 python3 - > "$f" 2>&1 <<'PY'
import sys
import pytest
from pagedmla.ops import _triton_decode
_triton_decode.WS16_F16 = False
sys.exit(pytest.main(["-q", "-m", "gpu", "-p", "no:cacheprovider", "-rf", "tests/test_decode_triton.py",
                      "-k", "ws16"]))
PY
echo "tests (bf16 widen, split W) rc $?"; tail -1 "$f"; grep -E "^FAILED|^E  " "$f" | head -12
[ -f dbg_ws16.py ] && PYTHONPATH=src timeout 100 python3 dbg_ws16.py 2>&1 | tail -20 | cut -c1-120
f="$OUT/variants-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 150 python3 benchmarks/experiments/ws16_variants.py --case 64,4096 \
  --case 128,4096 --case 1,16384 --variant f16=0 --variant f16=1 > "$f" 2>&1
echo "variants rc $?"; cat "$f" | cut -c1-150
f="$OUT/timeline-bf16-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 benchmarks/experiments/ws16_timeline.py --case 64,4096 --set F16=0 \
  --json "$OUT/timeline-bf16-$COMMIT.json" > "$f" 2>&1
echo "timeline rc $?"; grep -v "^\s*$" "$f" | cut -c1-250 | tail -3
