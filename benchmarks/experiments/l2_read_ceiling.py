"""The H200's L2-to-SM read bandwidth, to set against the 64-row decode's traffic at batch 1 (128 heads: every
64-key block is read by both row tiles' programs, and q's 73.7 KB tile by every program).

A Triton kernel in which each program sums `per_program` bytes of a buffer small enough to stay in L2 (read
once before the timing, so the timed reads hit L2), timed over CUDA-graph replays; reported as bytes moved
into the SMs per second. The HBM copy ceiling is measured in the same run for the ratio.

Twenty-ninth session (c10fe32, benchmarks/results/session-29/l2-read-c10fe32.txt): 5.0 TB/s at 132 programs x
256 KB (6.9 us a launch), 7.4 TB/s at 132 x 1 MB (18.6 us), 7.7 TB/s at 264 x 256 KB (9.0 us), launch included;
copy ceiling 4.28 TB/s (eager) in the same run.

    PYTHONPATH=src:benchmarks python3 benchmarks/experiments/l2_read_ceiling.py
"""

from __future__ import annotations

import pathlib
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from decode_probe import _time_graph, copy_ceiling


@triton.jit
def _read_kernel(src, out, chunk_elems, num_chunks, BLOCK: tl.constexpr):
    """Program p sums chunk p % num_chunks of src (BLOCK int32 a step: 8192 keeps 8 16-byte loads a thread of
    8 warps in flight)."""
    pid = tl.program_id(0)
    base = (pid % num_chunks).to(tl.int64) * chunk_elems
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for i in range(0, chunk_elems, BLOCK):
        acc += tl.load(src + base + i + tl.arange(0, BLOCK))
    tl.store(out + pid, tl.sum(acc, 0))


def _launcher(src, out, chunk, num_chunks, programs):
    def fn():
        _read_kernel[(programs,)](src, out, chunk, num_chunks, BLOCK=8192, num_warps=8)
    return fn


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ceiling = copy_ceiling()
    print(f"copy ceiling {ceiling}", flush=True)
    for buffer_mb, programs, per_program_kb in ((16, sms, 256), (16, 2 * sms, 256), (16, sms, 1024),
                                                (32, sms, 256), (400, sms, 256)):
        elems = buffer_mb * 2**20 // 4
        src = torch.randint(0, 1000, (elems,), dtype=torch.int32, device="cuda")
        chunk = per_program_kb * 1024 // 4
        num_chunks = max(1, elems // chunk)
        out = torch.empty(programs, dtype=torch.int32, device="cuda")
        ms = _time_graph(_launcher(src, out, chunk, num_chunks, programs))
        moved = programs * chunk * 4
        print(f"buffer {buffer_mb} MB, {programs} programs x {per_program_kb} KB: {ms * 1e3:.2f} us, "
              f"{moved / ms / 1e9:.2f} TB/s into the SMs", flush=True)


if __name__ == "__main__":
    main()
