#!/usr/bin/env bash
# One device call (edit per session). Twenty-fourth session, call 2: the register-operand 16-row FP8 kernel with
# WS16_RS_EARLY_LAUNCH (its programs let the next kernel launch once past their wait): its ws16 gpu tests, the
# call's costs around the kernel (rs_tail.py), then the harness at 16 heads with the flag on and (FP8 only) off.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-ws16-rs-$COMMIT.txt"
PYTHONPATH=src timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider -rf tests/test_decode_triton.py \
  -k "ws16 and registers or automatic" > "$f" 2>&1
echo "ws16 tests rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
f="$OUT/rs-tail-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 150 python3 benchmarks/experiments/rs_tail.py --case 64,4096 --case 128,4096 \
  --repeat 2 > "$f" 2>&1
echo "tail rc $?"; cat "$f" | tail -26
f="$OUT/bench-decode-h16-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -m pagedmla.cli bench decode --heads 16 --batch 64 128 --keys 4096 \
  --kv-dtype bf16 fp8 --no-reference > "$f" 2>&1
echo "bench rc $?"; tail -5 "$f"
f="$OUT/bench-decode-h16-fp8-no-early-$COMMIT.txt"
PYTHONPATH=src timeout 60 python3 -c "import sys
from pagedmla.ops import _triton_decode; _triton_decode.WS16_RS_EARLY_LAUNCH = False
from pagedmla.cli import main
sys.exit(main(['bench', 'decode', '--heads', '16', '--batch', '64', '128', '--keys', '4096', '--kv-dtype', 'fp8', '--no-reference']))" > "$f" 2>&1
echo "bench (early launch off) rc $?"; tail -3 "$f"
