"""Experiment (not library code): 128-head MLA decode with the output columns split across programs.

A program owns BLOCK_M query rows (heads) and 512 / DV_SPLITS of the latent output columns. With 128 rows and 8
warps each warpgroup computes the logits of its own 64 rows (at 64 rows both warpgroups compute all of them), and
splitting the columns keeps the float32 accumulator at 128 x 256 (128 registers a thread); every column split
recomputes the logits. Simplified: every sequence has N keys in whole pages (page size a multiple of BLOCK_N),
one query token, no mask, no split-KV.

    PYTHONPATH=src python3 benchmarks/experiments/split_dv_decode.py   # on a GPU: checks, then times

Measured on the H200 (2026-11-29, commit 34dc20f; output in benchmarks/results/session-3/split-dv-34dc20f.txt):
every column split ran about half as fast as one 64-row, 8-warp program over all 512 columns (B64 N4096:
510 us at 128 rows x 256 columns, 944 us at 128 x 128, 488 us at 64 x 256 with 4 warps, against 263 us).
That unsplit baseline, which has no masks, ran at 37-39% of the matmul ceiling where the library's decode then
ran at 31-33%; this led to the decode's unmasked interior loop (`DecodeConfig.unmasked_interior`).
"""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _split_dv_kernel(q_ptr, out_ptr, blocks_ptr, lookup_ptr, num_keys, page_size, qk_scale,
                     stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_lt_b, stride_blk_b, stride_blk_s,
                     NUM_HEADS: tl.constexpr, KV_LORA_RANK: tl.constexpr, ROPE_DIM: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DV_SPLITS: tl.constexpr, Q_IN_REGS: tl.constexpr):
    BLOCK_DV: tl.constexpr = KV_LORA_RANK // DV_SPLITS
    TILES: tl.constexpr = NUM_HEADS // BLOCK_M
    pid = tl.program_id(0)
    c = pid % DV_SPLITS
    t = (pid // DV_SPLITS) % TILES
    b = pid // (DV_SPLITS * TILES)
    offs_m = t * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, KV_LORA_RANK)
    offs_r = tl.arange(0, ROPE_DIM)
    offs_d = c * BLOCK_DV + tl.arange(0, BLOCK_DV)
    q_row = b.to(tl.int64) * stride_q_t + offs_m.to(tl.int64) * stride_q_h
    q_nope = tl.load(q_ptr + q_row[:, None] + offs_k[None, :])
    q_rope = tl.load(q_ptr + q_row[:, None] + KV_LORA_RANK + offs_r[None, :])
    if Q_IN_REGS:
        # q pre-scaled in registers: an operand computed in registers stays there (wgmma's A from registers)
        q_nope = (q_nope.to(tl.float32) * qk_scale).to(tl.bfloat16)
        q_rope = (q_rope.to(tl.float32) * qk_scale).to(tl.bfloat16)
        scale = 1.0
    else:
        scale = qk_scale
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    lookup_row = lookup_ptr + b.to(tl.int64) * stride_lt_b
    for k0 in range(0, num_keys, BLOCK_N):
        page = tl.load(lookup_row + k0 // page_size)
        row = (page.to(tl.int64) * stride_blk_b + (k0 % page_size).to(tl.int64) * stride_blk_s
               + tl.arange(0, BLOCK_N).to(tl.int64) * stride_blk_s)
        k_nope = tl.load(blocks_ptr + row[:, None] + offs_k[None, :])
        k_rope = tl.load(blocks_ptr + row[:, None] + KV_LORA_RANK + offs_r[None, :])
        v = tl.load(blocks_ptr + row[:, None] + offs_d[None, :])
        s = tl.dot(q_nope, tl.trans(k_nope))
        s = tl.dot(q_rope, tl.trans(k_rope), s) * scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(tl.bfloat16), v, acc * alpha[:, None])
        m_i = m_new
    o_row = b.to(tl.int64) * stride_o_t + offs_m.to(tl.int64) * stride_o_h
    tl.store(out_ptr + o_row[:, None] + offs_d[None, :], (acc / l_i[:, None]).to(tl.bfloat16))


def launch(q, blocks, lookup, num_keys, out, *, block_m=128, block_n=16, dv_splits=2, warps=8, stages=2,
           q_in_regs=True, scale=0.1352):
    batch, heads = q.shape[0], q.shape[1]
    grid = (batch * (heads // block_m) * dv_splits,)
    _split_dv_kernel[grid](q, out, blocks, lookup, num_keys, blocks.shape[1], scale * 1.4426950408889634,
                           q.stride(0), q.stride(1), out.stride(0), out.stride(1), lookup.stride(0),
                           blocks.stride(0), blocks.stride(1),
                           NUM_HEADS=heads, KV_LORA_RANK=512, ROPE_DIM=64, BLOCK_M=block_m, BLOCK_N=block_n,
                           DV_SPLITS=dv_splits, Q_IN_REGS=q_in_regs, num_warps=warps, num_stages=stages)


def main() -> int:
    sys.path.insert(0, __file__.rsplit("/", 2)[0])
    from decode_probe import _time_graph, matmul_ceiling

    mm = matmul_ceiling()
    print(f"# matmul ceiling {mm / 1e12:.0f} TFLOP/s")
    page = 64
    for batch, keys in ((64, 4096), (128, 8192)):
        heads = 128
        pages = keys // page
        gen = torch.Generator(device="cuda").manual_seed(0)
        copies = 2
        items = []
        for _ in range(copies):
            blocks = torch.randn(batch * pages, page, 576, generator=gen, device="cuda").to(torch.bfloat16)
            lookup = torch.randperm(batch * pages, generator=gen, device="cuda").to(torch.int32).view(batch, pages)
            q = torch.randn(batch, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
            out = torch.empty(batch, heads, 512, device="cuda", dtype=torch.bfloat16)
            items.append((q, blocks, lookup, out))
        q, blocks, lookup, out = items[0]
        rows = blocks[lookup[0].long()].reshape(-1, 576).float()
        want = torch.softmax(0.1352 * q[0].float() @ rows.T, -1) @ rows[:, :512]
        flops = 2.0 * batch * heads * keys * (576 + 512)
        for bm, bn, w, st, d in ((64, 64, 8, 2, 1), (128, 16, 8, 2, 2), (128, 16, 8, 3, 2), (128, 16, 8, 2, 4),
                                 (128, 16, 8, 4, 4), (64, 32, 4, 2, 2)):
            cfg = dict(block_m=bm, block_n=bn, warps=w, stages=st, dv_splits=d, q_in_regs=False)
            try:
                launch(q, blocks, lookup, keys, out, **cfg)
                err = float((out[0].float() - want).abs().max())
                ms = _time_graph(lambda items=items, keys=keys, cfg=cfg: [launch(*it[:3], keys, it[3], **cfg)
                                                                 for it in items]) / copies
            except Exception as exc:  # noqa: BLE001 - an experiment: report and go on
                print(f"B{batch} N{keys} {cfg}: failed {type(exc).__name__}: {str(exc)[:160]}")
                continue
            print(f"B{batch} N{keys} {cfg}: {ms * 1e3:.1f} us  {flops / ms / 1e9:.0f} TFLOP/s  "
                  f"{flops / (ms * 1e-3) / mm:.1%} of matmul  err {err:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
