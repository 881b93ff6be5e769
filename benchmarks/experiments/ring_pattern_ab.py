"""A/B of the two Gluon ring kernels on the same rows: 256 sequences x 2048 keys, 16 heads, one query token each,
bf16, pages of 64 (each worker of the dense kernel takes one whole sequence: no combine).

    PYTHONPATH=src python3 benchmarks/experiments/ring_pattern_ab.py [--eager]

Rows: the dense ring kernel (table entries), the sparse ring kernel with every sequence's rows as its index row in
order (the same addresses the dense kernel reads) and shuffled, and the Triton dense kernel. CUDA-graph replays;
the copy ceiling of the same run. `--eager`: call each kernel twice without timing (for a profiler).
"""

import sys
from pathlib import Path

import torch

import pagedmla as pm
from pagedmla.configs.decode import RING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from decode_probe import _time_graph  # the probe beside this folder

B, N, H, PS = 256, 2048, 16, 64


def time_graph(fn, replays=20):
    """Median microseconds of one `fn()` over CUDA-graph replays (`decode_probe._time_graph`)."""
    return _time_graph(fn, replays=replays) * 1e3


def main():
    from pagedmla.ops import _triton_decode

    gen = torch.Generator(device="cuda").manual_seed(0)
    pages = N // PS
    params = pm.KVCacheParams(1, 576, True, PS, 1, torch.bfloat16)
    blocks = torch.randn(params.block_shape(B * pages), generator=gen, device="cuda").to(torch.bfloat16)
    table = torch.randperm(B * pages, generator=gen, device="cuda").to(torch.int32).view(B, pages)
    lengths = torch.full((B,), N - 1, dtype=torch.int32, device="cuda")
    kv = pm.PagedKVCacheCollection(blocks, lengths, table, params, max_seq_length=1, max_cache_length=N)
    offsets = torch.arange(B + 1, dtype=torch.int32, device="cuda")
    q = torch.randn(B, H, 576, generator=gen, device="cuda").to(torch.bfloat16)
    out = torch.empty(B, H, 512, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(B, H, device="cuda")
    pos = torch.arange(N, device="cuda")
    rows = (table.long()[:, pos // PS] * PS + pos % PS).to(torch.int32)  # [B, N], in order
    shuffled = torch.gather(rows, 1, torch.rand(B, N, generator=gen, device="cuda").argsort(1))
    topk = torch.full((B,), N, dtype=torch.int32, device="cuda")
    plan = pm.mla_decode_plan(offsets, kv, num_heads=H, backend="triton")
    src = torch.randn(2**29, device="cuda")
    dst = torch.empty_like(src)
    copy_us = time_graph(lambda: dst.copy_(src), replays=5)
    ceiling = 2 * src.numel() * 4 / copy_us / 1e6
    nbytes = B * N * 1152
    print(f"copy ceiling {ceiling:.2f} TB/s; plan workers {plan.num_partitions}")

    def dense(cfg):
        return lambda: _triton_decode.launch_decode(q, offsets, blocks, lengths, table, 0, 0.1, 1, 0, out, lse,
                                                    plan.schedule, max_seq_length=1, qk_rope_head_dim=64, config=cfg)

    def sparse(idx):
        return lambda: pm.mla_decode_kv_cache_ragged(q, offsets, kv, 0, 0.1, mask="null", output=out, indices=idx,
                                                     topk_lengths=topk, qk_rope_head_dim=64, backend="triton")
    if "--eager" in sys.argv:
        for fn in (dense(RING), sparse(rows)):
            fn()
            fn()
        torch.cuda.synchronize()
        return
    for name, fn in (("dense ring", dense(RING)), ("dense (heuristic)", dense(None)),
                     ("sparse ring, rows in order", sparse(rows)), ("sparse ring, rows shuffled", sparse(shuffled))):
        us = time_graph(fn)
        print(f"{name:28s} {us:8.1f} us  {nbytes / us / 1e6:.2f} TB/s  {nbytes / us / 1e6 / ceiling:.1%}")


if __name__ == "__main__":
    main()
