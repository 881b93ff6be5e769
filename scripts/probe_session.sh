#!/usr/bin/env bash
# One device call (edit per session). Prepared for the next session: the first GPU run of the draft 16-row FP8
# decode without a widened copy (benchmarks/experiments/ws16_rs.py, never run yet): the e4m3 conversions'
# throughput (cvt_throughput.py), the ws16 gpu tests and
# ws16_stress.py with it swapped into the launcher, then its time against the shipped kernel. Capped so that a
# hang costs minutes, not the session.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
# the e4m3 conversions' throughput (decides one consumer warpgroup against two)
PYTHONPATH=src timeout 60 python3 benchmarks/experiments/cvt_throughput.py > "$OUT/cvt-$COMMIT.txt" 2>&1
echo "cvt rc $?"; cat "$OUT/cvt-$COMMIT.txt" | tail -4
# one small case first: a hang costs 90 s, not the whole call
f="$OUT/gpu-test-ws16-rs-one-$COMMIT.txt"
PYTHONPATH=src timeout 90 python3 -c "import sys; sys.path.insert(0, 'benchmarks/experiments'); import ws16_rs
ws16_rs.install(); import pytest
sys.exit(pytest.main(['-q', '-x', '-m', 'gpu', '-p', 'no:cacheprovider', '-rf', 'tests/test_decode_triton.py', '-k',
                      'test_gpu_ws16 and H16-ps64-q1 and causal and W1']))" > "$f" 2>&1
rc=$?; echo "one ws16 test (register operands) rc $rc"; tail -3 "$f"
[ $rc -eq 0 ] || exit 1
f="$OUT/gpu-tests-ws16-rs-$COMMIT.txt"
PYTHONPATH=src timeout 150 python3 -c "import sys; sys.path.insert(0, 'benchmarks/experiments'); import ws16_rs
ws16_rs.install(); import pytest
sys.exit(pytest.main(['-q', '-x', '-m', 'gpu', '-p', 'no:cacheprovider', '-rf', 'tests/test_decode_triton.py',
                      '-k', 'ws16']))" \
  > "$f" 2>&1
echo "ws16 tests (register operands) rc $?"; tail -1 "$f"; grep -E "^FAILED|Error" "$f" | head -8
PYTHONPATH=src timeout 60 python3 -c "import sys, runpy; sys.path.insert(0, 'benchmarks/experiments'); import ws16_rs
ws16_rs.install(); sys.argv = ['ws16_stress.py', '--reps', '1']
runpy.run_path('benchmarks/experiments/ws16_stress.py', run_name='__main__')" > "$OUT/stress-rs-$COMMIT.txt" 2>&1
echo "stress rc $?"; grep -E "over|worst|Error|differ" "$OUT/stress-rs-$COMMIT.txt" | head -8
f="$OUT/time-rs-$COMMIT.txt"
PYTHONPATH=src:benchmarks timeout 120 python3 benchmarks/experiments/ws16_rs.py --time 64,4096 128,4096 1,16384 \
  > "$f" 2>&1
echo "time rc $?"; tail -12 "$f"
