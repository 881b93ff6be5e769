"""Probe: GPU timings of the prefill and cache-write Triton kernels against torch baselines timed in the same run.

    PYTHONPATH=src python3 benchmarks/prefill_probe.py [--sweep] [--json results.json] [--wait-pid PID]

Cases (PERF.md): causal MLA prefill (q/k 192, v 128) at B x L in {1x8192, 4x4096, 16x1024} with 128 heads and
2x4096 with 16 heads against torch SDPA's cuDNN backend on the same q/k/v (FLOPs `B*H*L*L*(192+128)`);
decompression [16384, 512] x [512, 32768] (and the 16-head [4096, 512] x [512, 4096]) against torch.matmul of the
same GEMM; the k projection 4096 x 7168 -> 576 (and 1024, 256, 64 tokens) into a paged cache against torch.matmul.
Random data, medians of `triton.testing.do_bench` (flushed L2, single calls: calls whose host-side launch takes
longer than the flush are host-bound), or with `--graph` of CUDA-graph replays (device time). `--sweep` also
times the candidate launch configs.
Every case is compiled and run once first; `--wait-pid` then waits for another process (a test run sharing the
GPU) to exit before timing. This is a probe, not the benchmark harness (`pagedmla.testing.perf`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import traceback
from dataclasses import replace

import torch
import triton
import triton.testing

from pagedmla.configs.cache_write import MatmulToCacheConfig
from pagedmla.configs.prefill import DecompressConfig, PrefillConfig
from pagedmla.ops import _triton_cache_write as tcw
from pagedmla.ops import _triton_prefill as tpf
from pagedmla.testing import perf

BF16 = torch.bfloat16
PAGE = 64


def _paged(batch: int, tokens_per_seq: int, gen: torch.Generator, head_size: int = 576):
    """A bf16 MLA cache of `batch` sequences whose pages are shuffled across the pool."""
    pages = triton.cdiv(tokens_per_seq, PAGE)
    num_blocks = batch * pages + 1
    blocks = torch.randn(num_blocks, 1, 1, PAGE, 1, head_size, generator=gen).to(BF16).cuda()
    table = torch.randperm(batch * pages, generator=gen).view(batch, pages).to(torch.int32).cuda()
    return blocks, table


def _offsets(batch: int, per_seq: int):
    return (torch.arange(batch + 1, dtype=torch.int32) * per_seq).cuda()


EXTRA_CONFIGS: list[PrefillConfig | None] = []  # from --config (None: the heuristic's)


def parse_config(text: str) -> PrefillConfig | None:
    """`default` (the heuristic's) or `block_m,block_n,warps,stages[,inner]`."""
    if text == "default":
        return None
    parts = text.split(",")
    m, n, w, st = (int(x) for x in parts[:4])
    return PrefillConfig(m, n, w, st, heads_inner="inner" in parts[4:])


def prefill_cases(sweep: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    configs = [PrefillConfig()]
    if sweep:
        configs += [PrefillConfig(heads_inner=True), PrefillConfig(128, 64, 8, 3),
                    PrefillConfig(128, 64, 8, 3, heads_inner=True)]
    if EXTRA_CONFIGS:
        configs = EXTRA_CONFIGS
    for batch, length, heads in ((1, 8192, 128), (4, 4096, 128), (16, 1024, 128), (2, 4096, 16)):
        gen = torch.Generator().manual_seed(batch * length + heads)
        rows = batch * length
        blocks, table = _paged(batch, length, gen)
        offs = _offsets(batch, length)
        zeros = torch.zeros(batch, dtype=torch.int32, device="cuda")
        q = torch.randn(rows, heads, 192, generator=gen).to(BF16).cuda()
        k_buffer = torch.randn(rows, heads, 256, generator=gen).to(BF16).cuda()
        out = torch.empty(rows, heads, 128, dtype=BF16, device="cuda")
        lse = torch.empty(rows, heads, dtype=torch.float32, device="cuda")
        scale = 192 ** -0.5
        flops = batch * heads * length * length * (192 + 128)
        name = f"prefill B{batch}xL{length} H{heads}"

        # cuDNN gets the same keys: nope from k_buffer, rope gathered from the cache and shared by every head
        pos = torch.arange(length, device="cuda")
        rope = torch.stack([blocks[table[b, pos // PAGE].long(), 0, 0, pos % PAGE, 0, 512:] for b in range(batch)])
        qs = q.view(batch, length, heads, 192).transpose(1, 2).contiguous()
        ks = torch.cat([k_buffer[..., :128].reshape(batch, length, heads, 128),
                        rope.unsqueeze(2).expand(-1, -1, heads, -1)], -1).transpose(1, 2).contiguous()
        vs = k_buffer[..., 128:].reshape(batch, length, heads, 128).transpose(1, 2).contiguous()

        def cudnn(qs=qs, ks=ks, vs=vs, scale=scale):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)

        yield dict(case=name, impl="torch sdpa cudnn", config="", fn=cudnn, flops=flops, baseline=True)
        for cfg in configs:
            def mine(cfg=cfg, q=q, k_buffer=k_buffer, offs=offs, zeros=zeros, blocks=blocks, table=table,
                     out=out, lse=lse, scale=scale):
                tpf.mla_prefill_kv_cache_ragged(q, k_buffer[..., :128], k_buffer[..., 128:], offs, zeros, offs,
                                                blocks, zeros, table, None, 0, 0, scale, 1, 0, out, lse, cfg)
                return out

            def check(out=out, cudnn=cudnn, batch=batch, length=length, heads=heads):
                ref = cudnn().transpose(1, 2).reshape(batch * length, heads, 128)
                return float((out.float() - ref.float()).abs().max())

            yield dict(case=name, impl="triton", config="heuristic" if cfg is None else repr(cfg), fn=mine,
                       flops=flops, check=check)


def decompress_cases(sweep: bool):
    configs = [DecompressConfig()]
    if sweep:
        configs += [DecompressConfig(gather_rows=32, gather_warps=8)]
    for rows, heads in ((16384, 128), (4096, 16)):
        gen = torch.Generator().manual_seed(rows + heads)
        width = heads * 256
        batch = 4
        blocks, table = _paged(batch, rows // batch, gen)
        bro = _offsets(batch, rows // batch)
        co = torch.zeros(batch, dtype=torch.int32, device="cuda")
        lengths = torch.full((batch,), rows // batch, dtype=torch.int32, device="cuda")
        weight = (torch.randn(width, 512, generator=gen) / math.sqrt(512)).to(BF16).cuda()
        latent = torch.empty(rows, 512, dtype=BF16, device="cuda")
        k_buffer = torch.empty(rows, width, dtype=BF16, device="cuda")
        flops = 2 * rows * 512 * width
        name = f"decompress [{rows},512]x[512,{width}]"
        dense = torch.randn(rows, 512, generator=gen).to(BF16).cuda()

        def matmul(dense=dense, weight=weight, k_buffer=k_buffer):
            return torch.mm(dense, weight.t(), out=k_buffer)

        yield dict(case=name, impl="torch.matmul", config="", fn=matmul, flops=flops, baseline=True)
        for cfg in configs:
            def mine(cfg=cfg, bro=bro, co=co, rows=rows, weight=weight, blocks=blocks, lengths=lengths, table=table,
                     latent=latent, k_buffer=k_buffer):
                tpf.mla_decompress_k_cache_ragged_paged(bro, co, rows, weight, blocks, lengths, table, None, 0,
                                                        latent, k_buffer, cfg)
                return k_buffer

            def check(latent=latent, weight=weight, k_buffer=k_buffer):
                ref = latent.float() @ weight.float().T
                return float((k_buffer.float() - ref).abs().max())

            yield dict(case=name, impl="triton gather+mm", config=repr(cfg), fn=mine, flops=flops, check=check)


def graph_ms(fn) -> float:
    """Milliseconds per call from the harness's CUDA-graph timing (median of timed graph replays)."""
    return perf.time_gpu(fn, use_cuda_graph=True).median_us * 1e-3


def k_matmul_cases(sweep: bool, stream: bool = False, warps4: bool = False, wide: bool = False,
                   n512: bool = False, w4s4: bool = False):
    big = MatmulToCacheConfig(128, 128, 64, 8, 8, 3, tma=True)  # the heuristic's tile from 1024 rows
    configs = {8192: [None], 4096: [None, big], 1024: [None, big], 256: [None, MatmulToCacheConfig()], 64: [None]}
    if wide:  # 128 x (128 + 16) column tiles (576 = 4 x 144), spans of whole row tiles with 128 workers
        w144 = replace(big, tail_block_n=16, stream_workers=128, num_stages=4)
        w144_132 = replace(w144, stream_workers=132)
        configs = {4096: [None, w144, w144_132, replace(w144, num_stages=3), replace(w144, num_stages=5), None, w144,
                          w144_132],
                   8192: [None, w144, None, w144], 16384: [None, w144, None, w144]}
    elif w4s4:  # the tail tile's K pieces in the main programs, 4 or 8 warps, against the heuristic
        def tim(**kw):
            return MatmulToCacheConfig(**{**dict(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=4,
                                                 num_stages=4, tma=True, tail_block_n=64, tail_in_main=True), **kw})
        five = tim(num_stages=5)
        configs = {3072: [None, five, None, five], 4096: [None, five, tim(), None, five, tim()],
                   8192: [None, five, None, five], 16384: [None, five, None, five], 32768: [None, five, None, five]}
    elif n512:  # 4096 rows into 512 columns (128 whole 128 x 128 tiles, no tail) and into 576, for the tile rate
        configs = {4096: [None, replace(big, num_warps=4, num_stages=4), None]}
    elif warps4:  # the heuristic's 4096-row tiles at 4 warps against 8, alternating three times
        heur = replace(big, tail_block_n=64, tail_split_k=2)
        configs = {4096: [None, replace(heur, num_warps=4)] * 3}
    elif stream:  # stream-K in groups of three 128 + 64 column tiles, one program per SM; each config twice
        sk = replace(big, tail_block_n=64, stream_workers=132, num_stages=4)
        configs = {16384: [None, sk, None, sk], 8192: [None, sk, None, sk], 4096: [None, sk, None, sk]}
    if sweep:
        wide = MatmulToCacheConfig(128, 256, 64, 8, 8, 3, tma=True)
        one_group = MatmulToCacheConfig(64, 128, 64, 8, 4, 3, tma=True, tail_block_n=64, tail_split_k=2)
        configs[8192] += [replace(big, tail_block_n=64, tail_split_k=s) for s in (2, 4)]
        configs[4096] += [replace(big, tail_block_n=64, tail_split_k=s) for s in (2, 4)] + [
            replace(wide, split_k=2, tail_block_n=64, tail_split_k=4), one_group,
            replace(one_group, num_stages=4), replace(one_group, block_n=256, tail_split_k=1),
            replace(big, num_warps=4, tail_block_n=64, tail_split_k=2)] + [
            replace(big, block_k=128, num_stages=st, tail_block_n=64, tail_split_k=2) for st in (2, 3)] + [
            replace(big, num_stages=4, tail_block_n=64, tail_split_k=2)]
        configs[1024] += [replace(big, split_k=s, tail_block_n=64, tail_split_k=t) for s, t in ((2, 8), (4, 4))]
        configs[256] += [MatmulToCacheConfig(split_k=s) for s in (4, 8)] + [
            MatmulToCacheConfig(64, 64, 128, 1, 4, 4, split_k=s) for s in (4, 8)] + [
            MatmulToCacheConfig(tma=True, split_k=7), MatmulToCacheConfig(num_stages=3, split_k=7)]
        configs[64] += [MatmulToCacheConfig(64, 64, 128, 1, 4, 4, split_k=s) for s in (1, 4, 14)] + [
            MatmulToCacheConfig(64, 64, 64, 1, 4, 4, split_k=8)]
    for tokens, width in [(t, w) for t in configs for w in ((512, 576) if n512 else (576,))]:
        gen = torch.Generator().manual_seed(tokens)
        batch = 4
        blocks, table = _paged(batch, tokens // batch, gen, head_size=width)
        offs = _offsets(batch, tokens // batch)
        zeros = torch.zeros(batch, dtype=torch.int32, device="cuda")
        x = torch.randn(tokens, 7168, generator=gen).to(BF16).cuda()
        w = (torch.randn(width, 7168, generator=gen) / math.sqrt(7168)).to(BF16).cuda()
        c = torch.empty(tokens, width, dtype=BF16, device="cuda")
        flops = 2 * tokens * 7168 * width
        name = f"k_matmul {tokens}x7168->{width}"

        def matmul(x=x, w=w, c=c):
            return torch.mm(x, w.t(), out=c)

        yield dict(case=name, impl="torch.matmul", config="", fn=matmul, flops=flops, baseline=True)
        for cfg in configs[tokens]:
            def mine(cfg=cfg, x=x, offs=offs, w=w, blocks=blocks, zeros=zeros, table=table):
                tcw.k_matmul_ragged_paged(x, offs, w, blocks, zeros, table, 0, cfg)

            def check(x=x, w=w, blocks=blocks, table=table, tokens=tokens, batch=batch):
                per = tokens // batch
                pos = torch.arange(per, device="cuda")
                rows = torch.cat([blocks[table[b, pos // PAGE].long(), 0, 0, pos % PAGE, 0] for b in range(batch)])
                return float((rows.float() - (x.float() @ w.float().T)).abs().max())

            # NaN first, so that a config that skips rows cannot pass on a previous config's output
            yield dict(case=name, impl="triton", config=repr(cfg), fn=mine, flops=flops, check=check,
                       prepare=lambda blocks=blocks: blocks.fill_(float("nan")))


def row_cases(sweep: bool):
    tokens, heads, batch = 4096, 128, 4
    gen = torch.Generator().manual_seed(7)
    blocks, table = _paged(batch, tokens // batch, gen)
    offs = _offsets(batch, tokens // batch)
    zeros = torch.zeros(batch, dtype=torch.int32, device="cuda")
    gamma = torch.randn(512, generator=gen).to(BF16).cuda()
    q = torch.randn(tokens, heads, 64, generator=gen).to(BF16).cuda()
    q_out = torch.empty_like(q)
    freqs = torch.randn(tokens, 64, generator=gen).cuda()

    def rms():
        tcw.rms_norm_key_cache(blocks, zeros, table, gamma, offs, 0, 1e-6, tokens // batch)

    def rope():
        tcw.fused_qk_rope_ragged(q, offs, blocks, zeros, table, freqs, 0, True, q_out)

    yield dict(case="rms_norm 4096 rows x 512", impl="triton", config="", fn=rms, bytes=2 * tokens * 512 * 2)
    yield dict(case="rope 4096 tokens x 128 heads x 64", impl="triton", config="", fn=rope,
               bytes=2 * tokens * (heads + 1) * 64 * 2 + tokens * 64 * 4)


def stress_k_matmul() -> list[str]:
    """k_matmul on adversarial caches (NaN-poisoned, shuffled, layer 1 of 2) at several page sizes and row
    counts, against float32: NaN-placement mismatches and elements off by more than one bf16 step."""
    from pagedmla.testing import make_paged_batch

    lines = []
    for page_size in (1, 64, 128):
        for rows_b3 in (1, 65, 129):
            cached = [0, 0, 1, max(page_size - 1, 2), 700, 129]
            new = [0, 1, 300, rows_b3, 1, 64]
            pb = make_paged_batch(cached, new, head_size=576, page_size=page_size, dtype=BF16, device="cuda",
                                  fill_new_tokens=False)
            gen = torch.Generator().manual_seed(page_size + rows_b3)
            x = torch.randn(pb.num_rows, 7168, generator=gen).to(BF16).cuda()
            w = (torch.randn(576, 7168, generator=gen) / math.sqrt(7168)).to(BF16).cuda()
            want = x.float() @ w.float().T
            for cfg in (MatmulToCacheConfig(), MatmulToCacheConfig(tma=True),
                        MatmulToCacheConfig(128, 128, 64, 8, 8, 3, tma=True, tail_block_n=64, stream_workers=132)):
                kv = pb.kv.replace(blocks=pb.kv.blocks.clone())
                tcw.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths, kv.lookup_table,
                                          1, cfg)
                before = pb.kv.blocks.float()
                after = kv.blocks.float()
                expected = before.clone()
                rows = []
                for b, (c, n) in enumerate(zip(cached, new)):
                    for t in range(n):
                        pos = c + t
                        rows.append((int(pb.kv.lookup_table[b, pos // page_size]), pos % page_size))
                blk = torch.tensor([r[0] for r in rows], device="cuda")
                slot = torch.tensor([r[1] for r in rows], device="cuda")
                expected[blk, 0, 1, slot, 0] = want
                nan_mismatch = int((after.isnan() != expected.isnan()).sum())
                fin = expected.isfinite() & after.isfinite()
                err = (after - expected).abs()[fin]
                over = int((err > 2 ** -8 * expected.abs()[fin] + 1e-3).sum())
                got_rows = after[blk, 0, 1, slot, 0]
                row_err = (got_rows - want).abs().amax(1)
                bad_rows = (row_err > 0.05).nonzero().view(-1).tolist()[:8]
                lines.append(f"stress k_matmul ps{page_size} rows{pb.num_rows} tma={cfg.tma} "
                             f"stream={cfg.stream_workers}: NaN-placement mismatches {nan_mismatch}, elements beyond one bf16 step {over}, max err "
                             f"{float(err.max()):.3g}, bad rows {bad_rows}")
                print(lines[-1], flush=True)
    return lines


def _wait(pid: int | None) -> None:
    while pid:
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also time the candidate launch configs")
    parser.add_argument("--json", default=None, help="write every row here")
    parser.add_argument("--wait-pid", type=int, default=None, help="time only after this process exits")
    parser.add_argument("--graph", action="store_true",
                        help="time CUDA-graph replays (device time without the launch's host overhead) with the "
                             "harness's timer, instead of do_bench's flushed single calls")
    parser.add_argument("--only", default="", help="comma-separated subset: prefill,decompress,k_matmul,rows")
    parser.add_argument("--stream", action="store_true", help="k_matmul: time stream-K configs instead")
    parser.add_argument("--wide", action="store_true", help="k_matmul: time 128 x 144 column tiles instead")
    parser.add_argument("--n512", action="store_true", help="k_matmul: 4096 rows into 512 and 576 columns")
    parser.add_argument("--w4s4", action="store_true", help="k_matmul: tail pieces in the main programs (tail_in_main)")
    parser.add_argument("--warps4", action="store_true", help="k_matmul: 4096 rows at 4 warps against 8, three times")
    parser.add_argument("--stress", action="store_true", help="also check k_matmul on adversarial caches")
    parser.add_argument("--config", action="append", default=[],
                        help="prefill configs to time instead (`default` = the heuristic's, or "
                             "`block_m,block_n,warps,stages[,inner]`)")
    args = parser.parse_args()
    EXTRA_CONFIGS.extend(parse_config(c) for c in args.config)
    stress = []
    if args.stress:
        try:
            stress = stress_k_matmul()
        except Exception as exc:  # noqa: BLE001 - a probe: report the case and go on
            print(f"FAILED stress: {exc!r}"[:400], flush=True)
            traceback.print_exc(limit=3)
    families = {"prefill": prefill_cases, "decompress": decompress_cases,
                "k_matmul": lambda sweep: k_matmul_cases(sweep, args.stream, args.warps4, args.wide, args.n512,
                                                                 args.w4s4),
                "rows": row_cases}
    chosen = [f for f in families if not args.only or f in args.only.split(",")]
    cases = []
    t0 = time.time()
    for fam in chosen:
        try:
            for case in families[fam](args.sweep):
                try:
                    if "prepare" in case:
                        case.pop("prepare")()
                    case["fn"]()
                    torch.cuda.synchronize()
                    if "check" in case:
                        case["max_abs_diff"] = case.pop("check")()
                    cases.append(case)
                except Exception as exc:  # noqa: BLE001 - a probe: report the case and go on
                    print(f"FAILED {case['case']} {case['impl']} {case['config']}: {exc!r}"[:400], flush=True)
                    traceback.print_exc(limit=2)
        except Exception as exc:  # noqa: BLE001 - a probe: report the case and go on
            print(f"FAILED building {fam}: {exc!r}"[:400], flush=True)
            traceback.print_exc(limit=3)
    print(f"compiled and checked {len(cases)} cases in {time.time() - t0:.1f} s", flush=True)
    _wait(args.wait_pid)
    baseline_ms = {}
    rows = []
    for case in cases:
        try:
            ms = graph_ms(case["fn"]) if args.graph else triton.testing.do_bench(case["fn"], warmup=10, rep=60,
                                                                                  return_mode="median")
        except Exception as exc:  # noqa: BLE001 - a probe: report the case and go on
            print(f"FAILED timing {case['case']} {case['impl']}: {exc!r}"[:300], flush=True)
            continue
        row = {k: v for k, v in case.items() if k != "fn"}
        row["us"] = ms * 1e3
        if "flops" in case:
            row["tflops"] = case["flops"] / ms / 1e9
        if "bytes" in case:
            row["gbps"] = case["bytes"] / ms / 1e6
        if case.get("baseline"):
            baseline_ms[case["case"]] = ms
        elif case["case"] in baseline_ms:
            row["vs_baseline"] = baseline_ms[case["case"]] / ms
        rows.append(row)
        rate = f"{row['tflops']:7.1f} TFLOP/s" if "tflops" in row else f"{row.get('gbps', 0):7.1f} GB/s"
        ratio = f"{row['vs_baseline']:.3f}" if "vs_baseline" in row else "-"
        diff = f"{row['max_abs_diff']:.3g}" if "max_abs_diff" in row else ""
        print(f"{row['case']:<38} {row['impl']:<18} {row['us']:10.1f} us {rate}  ratio {ratio:>6}  "
              f"diff {diff:<8} {row['config']}", flush=True)
    props = torch.cuda.get_device_properties(0)
    meta = dict(gpu=props.name, torch=torch.__version__, triton=triton.__version__, date=time.strftime("%Y-%m-%d"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows, stress=stress), f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
