"""Timing probe of the Triton MLA decode on one GPU, with the copy and matmul ceilings measured in the same run.

    PYTHONPATH=src python3 benchmarks/decode_probe.py [--sweep] [--json results.json] [--cases all|targets]

Each case is bf16, page size 64, random (never zero) data, a shuffled lookup table, every sequence at N keys
(cache N - q plus q new tokens). Times are CUDA-graph replays (median of several timed replays); a case whose
cache fits in L2 rotates over enough copies of it to overflow L2. Ratios: 16 heads against the copy ceiling on
bytes = cache rows read + q + out; 128 heads against the bf16 matmul ceiling on FLOPs = 2*T*H*N*(576+512).
`--sweep` also times a few launch configs and worker counts per case and reports the best. Not a harness: the
project's benchmark harness is `pagedmla.testing.perf`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import statistics
import sys

import torch
import triton
import triton.language as tl
from triton.errors import TritonError

import pagedmla as pm
from pagedmla.configs.decode import CombineConfig, DecodeConfig, combine_heuristic, heuristic, search_space
from pagedmla.ops import _triton_decode

PAGE = 64
L2_BYTES = 60 * 2**20
TARGET_CASES = [(64, 4096, 16, 1), (128, 4096, 16, 1), (64, 4096, 128, 1), (128, 4096, 128, 1),
                (1, 16384, 16, 1), (1, 16384, 128, 1)]
EXTRA_CASES = [(64, 4096, 16, 2), (64, 4096, 128, 2), (16, 4096, 128, 1), (32, 32768, 16, 1)]


def _time_graph(fn, *, replays: int = 20, repeats: int = 7) -> float:
    """Median milliseconds of one `fn()` over CUDA-graph replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / replays)
    return statistics.median(times)


@triton.jit
def _copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def copy_ceiling() -> dict[str, float]:
    """Device-to-device copy bandwidth (bytes read + written per second) of a 2 GiB buffer, three ways."""
    src = torch.randn(2**29, device="cuda")
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    rates = {"torch_graph": moved / (_time_graph(lambda: dst.copy_(src), replays=5) * 1e-3)}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dst.copy_(src)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    end.synchronize()
    rates["torch_eager"] = moved / (start.elapsed_time(end) / 10 * 1e-3)
    block = 8192
    grid = (triton.cdiv(src.numel(), block),)
    rates["triton"] = moved / (_time_graph(lambda: _copy_kernel[grid](src, dst, src.numel(), BLOCK=block),
                                           replays=5) * 1e-3)
    return rates


def matmul_ceiling() -> float:
    """bf16 8192^3 matmul rate through torch, FLOP/s."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = _time_graph(lambda: torch.matmul(a, b, out=c), replays=10)
    return 2 * 8192**3 / (ms * 1e-3)


class Case:
    """One decode problem, replicated `copies` times so that rotating over the copies overflows L2."""

    def __init__(self, batch: int, keys: int, heads: int, q_len: int, seed: int = 0, fp8: bool = False):
        self.batch, self.keys, self.heads, self.q_len, self.fp8 = batch, keys, heads, q_len, fp8
        pages = math.ceil(keys / PAGE)
        cache_bytes = batch * keys * 576 * 2
        self.copies = max(1, math.ceil(3 * L2_BYTES / cache_bytes))
        gen = torch.Generator(device="cuda").manual_seed(seed)
        params = pm.KVCacheParams(1, 576, True, PAGE, 1, torch.bfloat16)
        self.items = []
        rows = batch * q_len
        self.offsets = torch.arange(0, rows + 1, q_len, dtype=torch.int32, device="cuda")
        for _ in range(self.copies):
            blocks = torch.randn(params.block_shape(batch * pages), generator=gen, device="cuda").to(torch.bfloat16)
            table = torch.randperm(batch * pages, generator=gen, device="cuda").to(torch.int32).view(batch, pages)
            lengths = torch.full((batch,), keys - q_len, dtype=torch.int32, device="cuda")
            kv = pm.PagedKVCacheCollection(blocks, lengths, table, params, max_seq_length=q_len,
                                           max_cache_length=keys)
            if fp8:
                # the rope-aware 640-byte row (e4m3 latent with one scale per row, bf16 rope)
                kv = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=64)
            q = torch.randn(rows, heads, 576, generator=gen, device="cuda").to(torch.bfloat16)
            out = torch.empty(rows, heads, 512, device="cuda", dtype=torch.bfloat16)
            lse = torch.empty(rows, heads, device="cuda", dtype=torch.float32)
            self.items.append((kv, q, out, lse))

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.q_len * self.heads * self.keys * (576 + 512)

    @property
    def bytes(self) -> float:
        rows = self.batch * self.q_len
        row_bytes = 640 + 4 if self.fp8 else 576 * 2
        return self.batch * self.keys * row_bytes + rows * self.heads * (576 + 512) * 2

    def plan(self, num_partitions=None):
        kv = self.items[0][0]
        return pm.mla_decode_plan(self.offsets, kv, num_heads=self.heads, num_partitions=num_partitions,
                                  backend="triton")

    def plan_with_tail(self, tail_cost: int):
        """The default plan's workers with another split of the fixed cost (`DecodePlanConfig.tail_cost`)."""
        plan = self.plan()
        kv = self.items[0][0]
        cfg = _triton_decode.plan_config(batch=self.batch, num_heads=self.heads, max_q=self.q_len, max_keys=self.keys,
                                         device=kv.device)
        _triton_decode.fill_schedule(plan.schedule, self.offsets, kv.cache_lengths,
                                     dataclasses.replace(cfg, tail_cost=tail_cost))
        return plan

    def run(self, plan, config: DecodeConfig | None, combine: CombineConfig | None = None):
        def fn():
            for kv, q, out, lse in self.items:
                _triton_decode.launch_decode(q, self.offsets, kv.blocks, kv.cache_lengths, kv.lookup_table, 0,
                                             0.1352, 1, 0, out, lse, plan.schedule, max_seq_length=self.q_len,
                                             qk_rope_head_dim=64, config=config, scales=kv.scales,
                                             rope_aware=self.fp8, combine_config=combine)
        return fn

    def check(self, plan, config) -> float:
        """Max abs error of the first sequence of the first copy against the float32 reference."""
        kv, q, out, _ = self.items[0]
        self.run(plan, config)()
        n = self.q_len
        if self.fp8:
            from pagedmla.reference.paged import dequantize_rows
            raw = dequantize_rows(kv.blocks, kv.scales, granularity=640, rope_aware=True, qk_rope_head_dim=64)
            rows = raw[kv.lookup_table[0].long()].float()[:, 0, 0].reshape(-1, 576)[: self.keys]
        else:
            rows = kv.blocks[kv.lookup_table[0].long()].float()[:, 0, 0].reshape(-1, 576)[: self.keys]
        logits = 0.1352 * torch.einsum("shd,nd->shn", q[:n].float(), rows)
        pos = torch.arange(self.keys, device="cuda")
        qpos = torch.arange(self.keys - n, self.keys, device="cuda").view(-1, 1, 1)
        logits = logits.masked_fill(pos.view(1, 1, -1) > qpos, float("-inf"))
        want = torch.softmax(logits, -1) @ rows[:, :512]
        return float((out[:n].float() - want).abs().max())


def configs_for(case: Case, extra: list[DecodeConfig] | None = None) -> list[DecodeConfig]:
    base = heuristic(num_heads=case.heads, max_q=case.q_len, kv_lora_rank=512, rope_dim=64,
                     q_dtype=torch.bfloat16, cache_dtype=torch.float8_e4m3fn if case.fp8 else torch.bfloat16,
                     batch=case.batch, compute_dtype=torch.bfloat16 if case.fp8 else None)
    rest = extra if extra is not None else search_space(num_heads=case.heads, max_q=case.q_len)
    return [base] + [c for c in rest if c != base]


def parse_config(text: str) -> DecodeConfig:
    """`block_m,block_n,warps,stages[,prefetch][,interior][,ws][,r<N>][,ring<N>]`: `prefetch` loads the table
    entries a block ahead, `interior` runs the fully visible key blocks in an unmasked loop of their own, `ws`
    takes the warp-specialized Gluon kernel where it applies, `r<N>` caps the registers per thread at N,
    `ring<N>` runs the Gluon ring kernel with N slots (`16,32,4,1,ring2` is `configs.decode.RING`), `ws16` the
    16-row warp-specialized kernel (`16,64,4,1,ws16` is `configs.decode.WS16`)."""
    parts = text.split(",")
    m, n, w, st = (int(x) for x in parts[:4])
    regs = [int(x[1:]) for x in parts[4:] if x.startswith("r") and x[1:].isdigit()]
    ring = [int(x[4:]) for x in parts[4:] if x.startswith("ring")]
    return DecodeConfig(block_m=m, block_n=n, num_warps=w, num_stages=st, prefetch_table="prefetch" in parts[4:],
                        unmasked_interior="interior" in parts[4:], maxnreg=regs[0] if regs else None,
                        warp_specialized="ws" in parts[4:], ring_slots=ring[0] if ring else 0,
                        ws16="ws16" in parts[4:])


def kernel_times(fn, calls: int = 20) -> dict[str, float]:
    """Mean device microseconds per call of each kernel `fn` launches (torch.profiler, CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / calls for e in prof.key_averages() if e.device_time_total > 0}


def kernel_report() -> None:
    """Registers, spills and shared memory of every compiled decode kernel (from Triton's cache)."""
    from pagedmla.kernels import mla_decode

    for fn in (mla_decode._mla_decode_kernel, mla_decode._mla_decode_combine_kernel):
        for cache in fn.device_caches.values():
            for kernel in cache[0].values():
                consts = dict(kernel.src.constants) if hasattr(kernel, "src") else {}
                print(f"# {fn.__name__}: regs {kernel.n_regs} spills {kernel.n_spills} smem {kernel.metadata.shared} "
                      f"warps {kernel.metadata.num_warps} stages {kernel.metadata.num_stages} {consts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--cases", default="targets", choices=["targets", "all"])
    parser.add_argument("--json", default=None)
    parser.add_argument("--case", action="append", default=[],
                        help="B,N,H,q[,fp8]: run these cases instead of --cases (repeatable)")
    parser.add_argument("--config", action="append", default=[],
                        help="with --sweep: time these configs (see parse_config) instead of the search space")
    parser.add_argument("--workers", default="", help="with --sweep: comma-separated worker counts to add (`none`: only the default plan)")
    parser.add_argument("--tail-cost", default="",
                        help="with --sweep: comma-separated DecodePlanConfig.tail_cost values to add (default workers)")
    parser.add_argument("--combine", action="append", default=[],
                        help="with --profile: also profile and time these combine configs "
                             "`block_p,block_r,block_dv,warps[,pdl[,block_t]]` or `default[,pdl]` (the heuristic's tiles)")
    parser.add_argument("--ring-plan", action="store_true",
                        help="plan every case as a big batch (`configs.decode.ring_worth_it` forced true): the "
                             "default plan then schedules the ring kernel's two workers per SM")
    parser.add_argument("--profile", action="store_true",
                        help="also print each kernel's device time per call (default config and plan)")
    args = parser.parse_args()
    if args.ring_plan:
        _triton_decode.ring_worth_it = lambda **kw: True
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    copies, mm_rate = copy_ceiling(), matmul_ceiling()
    copy_bw = max(copies.values())
    print(f"# {props.name}, {sms} SMs, torch {torch.__version__}, triton {triton.__version__}; copy "
          + ", ".join(f"{k} {v / 1e12:.2f}" for k, v in copies.items())
          + f" TB/s (ceiling: the max); matmul {mm_rate / 1e12:.0f} TFLOP/s", flush=True)
    cases = [(*c, False) for c in TARGET_CASES + (EXTRA_CASES if args.cases == "all" else [])]
    if args.case:
        cases = [(*(int(x) for x in c.split(",")[:4]), c.endswith(",fp8")) for c in args.case]
    extra = [parse_config(c) for c in args.config] or None
    results = []
    for batch, keys, heads, q_len, fp8 in cases:
        case = Case(batch, keys, heads, q_len, fp8=fp8)
        default_plan = case.plan()
        plans = {default_plan.num_partitions: default_plan}
        if args.sweep:
            if args.workers:
                for w in (int(x) for x in args.workers.split(",") if x.isdigit()):
                    plans.setdefault(w, case.plan(w))
            else:
                tiles = -(-heads * q_len // configs_for(case)[0].block_m)
                for w in (default_plan.num_partitions // 2, 2 * default_plan.num_partitions, sms // tiles):
                    if w >= 1:
                        plans.setdefault(w, case.plan(w))
            for tail in (int(x) for x in args.tail_cost.split(",") if x):
                plans[f"{default_plan.num_partitions}t{tail}"] = case.plan_with_tail(tail)
        cfgs = configs_for(case, extra) if args.sweep else [None]
        best = None
        for w, plan in plans.items():
            for cfg in cfgs:
                try:
                    err = case.check(plan, cfg)
                    ms = _time_graph(case.run(plan, cfg)) / case.copies
                except (RuntimeError, ValueError, TritonError) as exc:  # e.g. too much shared memory
                    print(f"  B{batch} N{keys} H{heads} q{q_len} W{w} {cfg}: failed {type(exc).__name__}: "
                          f"{str(exc)[:200]}", flush=True)
                    continue
                sec = ms * 1e-3
                row = {"batch": batch, "keys": keys, "heads": heads, "q_len": q_len, "fp8": fp8, "workers": w,
                       "config": None if cfg is None else cfg.__dict__, "us": ms * 1e3, "max_err": err,
                       "tbps": case.bytes / sec / 1e12, "tflops": case.flops / sec / 1e12,
                       "copy_frac": case.bytes / sec / copy_bw, "mm_frac": case.flops / sec / mm_rate,
                       "default": (cfg is None or cfg == cfgs[0]) and plan is default_plan}
                results.append(row)
                tag = "default" if cfg is None else (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages,
                                                     cfg.prefetch_table, cfg.unmasked_interior, cfg.maxnreg,
                                                     "ws" if cfg.warp_specialized else "",
                                                     f"ring{cfg.ring_slots}" if cfg.ring_slots else "",
                                                     "ws16" if cfg.ws16 else "")
                print(f"  B{batch} N{keys} H{heads} q{q_len}{' fp8' if fp8 else ''} W{w} {tag}: "
                      f"{row['us']:.1f} us  {row['tbps']:.2f} TB/s  {row['tflops']:.0f} TFLOP/s  err {err:.2e}",
                      flush=True)
                if best is None or row["us"] < best["us"]:
                    best = row
        if args.profile:
            for name, us in kernel_times(case.run(default_plan, None)).items():
                print(f"  profile B{batch} N{keys} H{heads} q{q_len}{' fp8' if fp8 else ''}: {name[:60]} "
                      f"{us / case.copies:.1f} us per call", flush=True)
            for text in args.combine:
                fields = text.split(",")
                if fields[0] == "default":  # the heuristic's tiles, with pdl as given
                    cc = combine_heuristic(num_workers=default_plan.num_partitions, batch=batch, kv_lora_rank=512,
                                           rows=heads * q_len)
                    cc = dataclasses.replace(cc, pdl=fields[1:] != ["0"])
                else:
                    cc = CombineConfig(*(int(x) for x in fields[:4]), *(x != "0" for x in fields[4:5]),
                                       *(int(x) for x in fields[5:6]))
                times = kernel_times(case.run(default_plan, None, cc))
                us = sum(v for k, v in times.items() if "combine" in k) / case.copies
                graph_us = _time_graph(case.run(default_plan, None, cc)) * 1e3 / case.copies
                print(f"  profile B{batch} N{keys} H{heads} q{q_len}: combine {text}: {us:.1f} us per call, "
                      f"whole call {graph_us:.1f} us (graph)", flush=True)
        refresh = functools.partial(_triton_decode.refresh_plan, default_plan, case.offsets, case.items[0][0])
        if best is not None:
            # the plan kernel's device time: a graph of one tiny kernel replays as fast as the host launches it
            # (about 18 us on the H200's host), which is not the kernel's time
            best["plan_us"] = sum(kernel_times(refresh).values())
        case = None
        torch.cuda.empty_cache()

    try:
        kernel_report()
    except (AttributeError, KeyError, TypeError) as exc:
        print(f"# kernel report unavailable: {exc}")
    print("\n| B | N | H | q | default us | best us | best cfg (bm,bn,warps,stages) W | TB/s | TFLOP/s | "
          "copy frac | matmul frac | plan us (device) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for key in dict.fromkeys((r["batch"], r["keys"], r["heads"], r["q_len"], r["fp8"]) for r in results):
        rows = [r for r in results if (r["batch"], r["keys"], r["heads"], r["q_len"], r["fp8"]) == key]
        default = next((r for r in rows if r["default"]), rows[0])
        best = min(rows, key=lambda r: r["us"])
        c = best["config"]
        cfg = "default" if c is None else (f"{c['block_m']},{c['block_n']},{c['num_warps']},{c['num_stages']}"
                                           + (",ws" if c.get("warp_specialized") else ""))
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]}{' fp8' if key[4] else ''} | {default['us']:.1f} | {best['us']:.1f} | "
              f"{cfg} W{best['workers']} | {best['tbps']:.2f} | {best['tflops']:.0f} | {best['copy_frac']:.2f} | "
              f"{best['mm_frac']:.2f} | {best.get('plan_us', float('nan')):.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": props.name, "sms": sms, "torch": torch.__version__, "copy_bw": copies,
                       "mm_rate": mm_rate, "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
