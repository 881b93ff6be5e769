#!/usr/bin/env bash
# One device call (edit per session). Twenty-second session: the two-consumer ("ping-pong") register-operand FP8
# decode (benchmarks/experiments/ws16_pp.py): one small ws16 gpu test (a hang costs 90 s), the ws16 gpu tests and
# ws16_stress.py with it swapped into the launcher, then its time against the shipped kernel.
# Usage on the device: COMMIT=<sha> MOD=ws16_pp OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"; MOD=${MOD:-ws16_pp}
f="$OUT/gpu-test-$MOD-one-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -c "import sys; sys.path.insert(0, 'benchmarks/experiments'); import $MOD
$MOD.install(); import pytest
sys.exit(pytest.main(['-q', '-x', '-m', 'gpu', '-p', 'no:cacheprovider', '-rf', 'tests/test_decode_triton.py', '-k',
                      'test_gpu_ws16 and H16-ps64-q1 and causal and W1']))" > "$f" 2>&1
rc=$?; echo "one ws16 test ($MOD) rc $rc"; tail -3 "$f"
[ $rc -eq 0 ] || exit 1
f="$OUT/gpu-tests-$MOD-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -c "import sys; sys.path.insert(0, 'benchmarks/experiments'); import $MOD
$MOD.install(); import pytest
sys.exit(pytest.main(['-q', '-x', '-m', 'gpu', '-p', 'no:cacheprovider', '-rf', 'tests/test_decode_triton.py',
                      '-k', 'ws16']))" \
  > "$f" 2>&1
echo "ws16 tests ($MOD) rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
PYTHONPATH=src timeout 60 python3 -c "import sys, runpy; sys.path.insert(0, 'benchmarks/experiments'); import $MOD
$MOD.install(); sys.argv = ['ws16_stress.py', '--reps', '1']
runpy.run_path('benchmarks/experiments/ws16_stress.py', run_name='__main__')" > "$OUT/stress-$MOD-$COMMIT.txt" 2>&1
echo "stress rc $?"; grep -E "over|worst|Error|differ" "$OUT/stress-$MOD-$COMMIT.txt" | head -8
f="$OUT/time-$MOD-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 180 python3 benchmarks/experiments/$MOD.py --time 64,4096 128,4096 1,16384 \
  > "$f" 2>&1
echo "time rc $?"; tail -24 "$f"
