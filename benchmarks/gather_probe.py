"""Probe: how fast can an SM-wide Triton kernel read cache rows gathered at random, against the same rows read in
order, and against the copy ceiling of the harness, all in one run.

    PYTHONPATH=src python3 benchmarks/gather_probe.py

The sparse decode's 16-head target (issue 5) counts the gathered rows' bytes against the copy ceiling. This
probe reads the same rows as the harness's `sparse B64 q2 topk2048 N8192 H16 bf16` case (576 bf16 columns,
1152 bytes a row; 2048 random rows inside each sequence's 8192, for 64 x 2 query tokens) with a kernel that
only loads and sums them (no attention), so its time is a bound on what any gather of these rows can reach.
Random data; CUDA-graph replays through the harness's timer.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagedmla.testing import perf


@triton.jit
def _gather_sum_kernel(rows_ptr, idx_ptr, out_ptr, per_program, COLS: tl.constexpr, BLOCK: tl.constexpr):
    """Program p sums the rows `idx[p * per_program : (p + 1) * per_program]` and writes one row."""
    p = tl.program_id(0)
    cols = tl.arange(0, COLS)
    acc = tl.zeros([BLOCK, COLS], dtype=tl.float32)
    for i in range(0, per_program, BLOCK):
        idx = tl.load(idx_ptr + p * per_program + i + tl.arange(0, BLOCK))
        acc += tl.load(rows_ptr + idx.to(tl.int64)[:, None] * COLS + cols[None, :]).to(tl.float32)
    tl.store(out_ptr + p * COLS + cols, tl.sum(acc, 0))


def main() -> None:
    torch.manual_seed(0)
    batch, tokens, topk, keys = 64, 2, 2048, 8192
    pool = torch.randn(batch * keys, 576, device="cuda").to(torch.bfloat16)
    seq_base = (torch.arange(batch, device="cuda") * keys).repeat_interleave(tokens)
    rand = torch.stack([torch.randperm(keys, device="cuda")[:topk] for _ in range(batch * tokens)])
    idx_random = (rand + seq_base[:, None]).to(torch.int32).reshape(-1)
    idx_sorted = idx_random.view(batch * tokens, topk).sort(1).values.reshape(-1).contiguous()
    idx_seq = torch.arange(batch * tokens * topk, device="cuda", dtype=torch.int32) % (batch * keys)
    gathered = idx_random.numel() * 576 * 2
    print(f"rows gathered {idx_random.numel()}, bytes {gathered / 1e6:.1f} MB")
    # 576 columns make no power-of-two tile: the pool viewed as [rows * 9, 64], row r's chunks are 9r .. 9r + 8
    pool64 = pool.view(-1, 64)
    for name, idx in (("random", idx_random), ("sorted per sequence", idx_sorted), ("in order", idx_seq)):
        idx9 = (idx.to(torch.int64)[:, None] * 9 + torch.arange(9, device="cuda")).to(torch.int32).reshape(-1)
        for programs in (256, 512, 1024):
            per = idx9.numel() // programs
            for block in (64, 128):
                if per % block:
                    continue
                out = torch.empty(programs, 64, device="cuda")

                def run(idx9=idx9, out=out, per=per, block=block, programs=programs):
                    _gather_sum_kernel[(programs,)](pool64, idx9, out, per, COLS=64, BLOCK=block, num_warps=4,
                                                    num_stages=4)

                t = perf.time_gpu(run, use_cuda_graph=True)
                print(f"{name:22s} programs {programs:5d} block {block:4d}: {t.median_us:8.1f} us, "
                      f"{gathered / t.median_us / 1e6:6.2f} TB/s of gathered rows", flush=True)
    src = torch.empty(1 << 28, dtype=torch.int32, device="cuda")
    dst = torch.empty_like(src)
    t = perf.time_gpu(lambda: dst.copy_(src), use_cuda_graph=True)
    print(f"copy 1 GiB: {t.median_us:.1f} us, {2 * src.numel() * 4 / t.median_us / 1e6:.2f} TB/s (read + write)")


if __name__ == "__main__":
    main()
