"""Probe of the Triton sparse (top-k) MLA decode at DeepSeek-V3.2 shapes on one GPU.

Cases (random data, shuffled page tables, random distinct top-k positions per query token):
  - 128 heads, FP8 cache (rope-aware row, or granularity 64), bf16 or FP8 q: TFLOP/s counting
    `2 * T * H * topk * (576 + 512)`;
  - 16 heads, bf16 cache: bytes actually gathered (index rows x topk x 1152 B, the indices, q and out) per
    second, as a fraction of the device-to-device copy ceiling measured in the same run.
Each case runs the heuristic's config through the public op (and checks it against the float32 reference),
then, with --sweep, the launcher with other configs. Results go to OUT/sparse_probe.json and a table to
OUT/sparse_probe.txt (also printed).

    PYTHONPATH=src python3 benchmarks/sparse_probe.py --out bench-out [--sweep] [--budget-s 120]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict, replace

import torch

import pagedmla as pm
from pagedmla.configs.sparse_decode import SparseDecodeConfig, ring_config
from pagedmla.ops._triton_sparse_decode import sparse_decode
from pagedmla.reference.decode import mla_decode_kv_cache_ragged as reference_decode
from pagedmla.testing import perf
from pagedmla.testing.flops import sparse_decode_cost

RANK, ROPE, HEAD = 512, 64, 576


def build_cache(batch: int, tokens: int, new: int, page_size: int, kind: str, gen, device):
    """A shuffled paged MLA cache of `batch` sequences of `tokens` random rows (bf16, or FP8 `rope`/`fp8-g64`)."""
    pages = -(-tokens // page_size)
    params = pm.KVCacheParams(1, HEAD, True, page_size, 1, torch.bfloat16)
    num_blocks = batch * pages
    blocks = torch.randn(params.block_shape(num_blocks), generator=gen, device=device, dtype=torch.bfloat16)
    table = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32).view(batch, pages)
    lengths = torch.full((batch,), tokens - new, dtype=torch.int32, device=device)
    kv = pm.PagedKVCacheCollection(blocks, lengths, table, params, max_seq_length=new, max_cache_length=tokens)
    if kind == "rope":
        kv = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=ROPE)
    elif kind == "fp8-g64":
        kv = pm.quantize_kv_cache(kv, 64)
    del blocks
    return kv


def build_indices(kv, batch: int, new: int, tokens: int, topk: int, shared: bool, gen, device):
    """Per query token (or per sequence when shared) topk distinct positions, as physical rows."""
    rows = batch if shared else batch * new
    pos = torch.rand((rows, tokens), generator=gen, device=device).argsort(dim=1)[:, :topk]
    seq = torch.arange(rows, device=device) // (1 if shared else new)
    ps = kv.page_size
    idx = (kv.lookup_table.long()[seq.unsqueeze(1), pos // ps] * ps + pos % ps).to(torch.int32)
    if shared:
        idx = idx.repeat_interleave(new, dim=0)
    return idx.contiguous()


def make_case(name, *, heads, kind, q_kind, batch, tokens, new, topk, page_size, fold, gen, device):
    kv = build_cache(batch, tokens, new, page_size, kind, gen, device)
    num_rows = batch * new
    rope_aware = kind == "rope"
    qf = torch.randn((num_rows, heads, HEAD), generator=gen, device=device)
    q_scale = None
    if q_kind == "fp8":
        lat = qf[..., :RANK] if rope_aware else qf
        q_scale = (lat.abs().amax(dim=(1, 2)) / 448).contiguous()
        q = (lat / q_scale.view(-1, 1, 1)).to(torch.float8_e4m3fn)
        if rope_aware:
            q = torch.cat([q, qf[..., RANK:].to(torch.bfloat16).contiguous().view(torch.float8_e4m3fn)], -1)
    else:
        q = qf.to(torch.bfloat16)
    del qf
    iro = pm.row_offsets([new] * batch, device=device)
    idx = build_indices(kv, batch, new, tokens, topk, fold, gen, device)
    lengths = torch.full((batch,), topk, dtype=torch.int32, device=device)
    return {"name": name, "heads": heads, "kind": kind, "q_kind": q_kind, "batch": batch, "tokens": tokens, "new": new, "topk": topk,
                "fold": fold, "kv": kv, "q": q, "q_scale": q_scale, "iro": iro, "idx": idx, "lengths": lengths, "rope_aware": rope_aware,
                "scale": 1.0 / math.sqrt(192)}


def public_call(c, out):
    plan = pm.mla_decode_plan(c["iro"], c["kv"], num_heads=c["heads"], backend="triton")
    return lambda: pm.mla_decode_kv_cache_ragged(
        c["q"], c["iro"], c["kv"], 0, c["scale"], mask="null", output=out, plan=plan, indices=c["idx"],
        topk_lengths=c["lengths"], q_scale=c["q_scale"], per_token_scale_rope_aware=c["rope_aware"],
        fold_shared_index=c["fold"], qk_rope_head_dim=ROPE, backend="triton")


def launcher_call(c, out, lse, cfg: SparseDecodeConfig):
    kv = c["kv"]
    return lambda: sparse_decode(
        c["q"], c["iro"], kv.blocks, kv.cache_lengths, kv.lookup_table, kv.scales, 0, c["scale"], 0, -1,
        cfg.num_splits, out, lse, plan_schedule=None, max_seq_length=c["new"], fold_shared_index=c["fold"],
        q_scale=c["q_scale"], rope_aware=c["rope_aware"], qk_rope_head_dim=ROPE, indices=c["idx"],
        topk_lengths=c["lengths"], config=cfg)


def reference_error(c, out) -> float:
    """Max abs error of `out` against the float32 reference on the first 4 sequences."""
    kv, n = c["kv"], c["new"]
    rows = 4 * n
    want = torch.empty((rows, c["heads"], RANK), device=out.device)
    lse = torch.empty((rows, c["heads"]), device=out.device)
    reference_decode(c["q"][:rows], c["iro"][:5], kv.blocks, kv.cache_lengths[:4], kv.lookup_table[:4], kv.scales, 0,
                     c["scale"], 0, -1, 1, want, lse, q_scale=None if c["q_scale"] is None else c["q_scale"][:rows],
                     rope_aware=c["rope_aware"], qk_rope_head_dim=ROPE, indices=c["idx"][:rows],
                     topk_lengths=c["lengths"][:4])
    return float((out[:rows].float() - want).abs().max())


def measure(c, fn, ceilings) -> dict:
    t = perf.time_gpu(fn, warmup_ms=10, rep_ms=40)
    tokens = c["batch"] * c["new"]
    row_bytes = {"rope": 640 + 4, "fp8-g64": 576 + 4 * 9, "bf16": 1152}[c["kind"]]
    cost = sparse_decode_cost(tokens, num_heads=c["heads"], topk=c["topk"], cache_row_bytes=row_bytes,
                              index_rows=c["batch"] if c["fold"] else tokens)
    sec = t.median_us * 1e-6
    return {"us": t.median_us, "p20": t.p20_us, "p80": t.p80_us, "method": t.method, "tflops": cost.flops / sec / 1e12,
                "gbps": cost.bytes / sec / 1e9, "copy_frac": cost.bytes / sec / ceilings.copy_bytes_per_s,
                "mm_frac": cost.flops / sec / ceilings.matmul_flops_per_s}


def _cfg(bm, bn, splits, warps, stages, combine=(4, 512)):
    """A config; `combine`: the combine kernel's (rows, columns) per program."""
    return SparseDecodeConfig(block_m=bm, block_n=bn, num_splits=splits, num_warps=warps, num_stages=stages,
                              prefetch_indices=bm < 64, combine_block_r=combine[0], combine_block_dv=combine[1])


def _label(cfg: SparseDecodeConfig) -> str:
    text = str(tuple(asdict(cfg).values())[:5])
    if cfg.ring_slots:
        text += f" ring {cfg.ring_slots}"
    if (cfg.combine_block_r, cfg.combine_block_dv) != (4, 512):
        text += f" combine r{cfg.combine_block_r} dv{cfg.combine_block_dv}"
    return text


# Alternatives to the heuristic's pick (which is the best of these on H200, 2026 runs).
SWEEP_64 = [_cfg(64, 64, 1, 8, 2), _cfg(64, 64, 1, 8, 3), _cfg(64, 32, 1, 8, 3), _cfg(64, 32, 1, 8, 4),
            _cfg(64, 64, 2, 8, 2)]
SWEEP_16 = [_cfg(16, 32, 2, 4, 3), _cfg(16, 32, 2, 4, 3, (8, 128)), _cfg(16, 32, 2, 4, 3, (16, 128)),
            _cfg(16, 32, 4, 4, 3), _cfg(16, 32, 2, 4, 4), _cfg(16, 64, 2, 8, 3),
            _cfg(16, 32, 2, 8, 4), _cfg(16, 64, 4, 8, 2)]
# the Gluon ring kernel (`ring_config`): ring depths and splits
SWEEP_16 += [replace(ring_config(num_groups=1, topk=2048, num_sms=132, slots=s), num_splits=n)
             for s, n in ((5, 1), (4, 1), (3, 1), (3, 2), (5, 2), (2, 2), (2, 4))]
# the rope-aware FP8 cache at 16 heads: the Triton kernel's 16-row tile, and the ring kernel at 2 and 3 slots
SWEEP_16_FP8 = [_cfg(16, 32, 2, 4, 3)] + [replace(ring_config(num_groups=1, topk=2048, num_sms=132, slots=s),
                                                 num_splits=n) for s, n in ((2, 2), (3, 2), (3, 1))]
SWEEP_32 = [_cfg(32, 64, 4, 8, 2), _cfg(32, 32, 4, 8, 3), _cfg(32, 32, 2, 4, 3)]
SWEEP_64_FP8 = [_cfg(64, 64, 1, 8, 3), _cfg(64, 64, 1, 8, 2), _cfg(64, 64, 1, 8, 3), _cfg(64, 32, 1, 8, 3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-out"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32768, help="cached tokens per sequence")
    ap.add_argument("--topk", type=int, default=2048)
    ap.add_argument("--query-tokens", type=int, default=2)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--sweep", action="store_true", help="also time other launch configs")
    ap.add_argument("--cases", default="", help="only the cases whose name contains one of these (comma-separated)")
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop starting new configs after this long")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda")
    t0 = time.time()
    gen = torch.Generator(device=device).manual_seed(0)
    ceilings = perf.measure_ceilings(warmup_ms=50, rep_ms=100)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": __import__("triton").__version__,
                "copy_TBps": ceilings.copy_bytes_per_s / 1e12, "matmul_TFLOPs": ceilings.matmul_flops_per_s / 1e12}
    rows = []
    common = {"batch": args.batch, "tokens": args.tokens, "new": args.query_tokens, "topk": args.topk,
                  "page_size": args.page_size, "gen": gen, "device": device}
    specs = [("H128-rope-fp8kv-bf16q", {"heads": 128, "kind": "rope", "q_kind": "bf16", "fold": False}, SWEEP_64),
             ("H16-bf16kv", {"heads": 16, "kind": "bf16", "q_kind": "bf16", "fold": False}, SWEEP_16),
             ("H16-bf16kv-fold", {"heads": 16, "kind": "bf16", "q_kind": "bf16", "fold": True}, SWEEP_32),
             ("H16-rope-fp8kv-bf16q", {"heads": 16, "kind": "rope", "q_kind": "bf16", "fold": False}, SWEEP_16_FP8),
             ("H128-fp8g64kv-bf16q", {"heads": 128, "kind": "fp8-g64", "q_kind": "bf16", "fold": False}, SWEEP_64_FP8),
             ("H128-rope-fp8kv-fp8q", {"heads": 128, "kind": "rope", "q_kind": "fp8", "fold": False}, SWEEP_64_FP8)]
    if args.cases:
        specs = [sp for sp in specs if any(key in sp[0] for key in args.cases.split(","))]
    for name, spec, sweep in specs:
        if time.time() - t0 > args.budget_s:
            rows.append({"case": name, "config": "-", "note": "skipped: budget"})
            continue
        c = make_case(name, **spec, **common)
        out = torch.empty((c["q"].shape[0], c["heads"], RANK), dtype=torch.bfloat16, device=device)
        lse = torch.empty((c["q"].shape[0], c["heads"]), dtype=torch.float32, device=device)
        try:
            fn = public_call(c, out)
            fn()
            torch.cuda.synchronize()
            err = reference_error(c, out)
            rows.append(dict(case=name, config="heuristic", err=err, **measure(c, fn, ceilings)))
        except Exception as exc:  # noqa: BLE001 - record and go on
            rows.append({"case": name, "config": "heuristic", "note": f"{type(exc).__name__}: {str(exc)[:200]}"})
        print(rows[-1], flush=True)
        if args.sweep:
            for cfg in sweep:
                if time.time() - t0 > args.budget_s:
                    break
                try:
                    fn = launcher_call(c, out, lse, cfg)
                    fn()
                    torch.cuda.synchronize()
                    err = reference_error(c, out)
                    rows.append(dict(case=name, config=_label(cfg), err=err,
                                     **measure(c, fn, ceilings)))
                except Exception as exc:  # noqa: BLE001
                    rows.append({"case": name, "config": _label(cfg),
                                 "note": f"{type(exc).__name__}: {str(exc)[:200]}"})
                print(rows[-1], flush=True)
        del c, out, lse
        torch.cuda.empty_cache()
    header = (f"{info['gpu']} | torch {info['torch']} | triton {info['triton']} | copy {info['copy_TBps']:.2f} TB/s"
              f" | bf16 matmul {info['matmul_TFLOPs']:.0f} TFLOP/s | B={args.batch} q={args.query_tokens} "
              f"topk={args.topk} N={args.tokens} ps={args.page_size}")
    columns = (f"{'case':26} {'config (bm,bn,splits,warps,stages)':52} {'us':>8} {'TFLOP/s':>8} {'GB/s':>7} "
               f"{'%copy':>6} {'%mm':>5} {'maxerr':>8}")
    lines = [header, columns]
    for r in rows:
        if "us" in r:
            lines.append(f"{r['case']:26} {r['config']:52} {r['us']:8.1f} {r['tflops']:8.1f} {r['gbps']:7.0f} "
                         f"{100 * r['copy_frac']:5.1f}% {100 * r['mm_frac']:4.1f}% {r['err']:8.1e}")
        else:
            lines.append(f"{r['case']:26} {r['config']:52} {r.get('note', '')}")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(args.out, "sparse_probe.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "sparse_probe.json"), "w") as f:
        json.dump({"info": info, "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
