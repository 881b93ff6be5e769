#!/usr/bin/env bash
# One device call (edit per session). Twenty-eighth session, call 10: the whole gpu test tier on main's kernels.
# Usage on the device: COMMIT=<sha> OUT=<dir> bash scripts/probe_session.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
f="$OUT/gpu-tests-all-$COMMIT.txt"
PYTHONPATH=src timeout 560 python3 -m pytest -q -m gpu tests -p no:cacheprovider --durations=15 > "$f" 2>&1
echo "tests rc $?"; grep -E "passed|failed|error" "$f" | tail -5; grep -E "^FAILED|^ERROR" "$f" | head -20
