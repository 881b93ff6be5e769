"""`pagedmla bench`: time the public ops on the GPU against the copy and matmul ceilings measured in the same run.

    pagedmla bench [decode|mtp|prefill|decompress|cache-write|sparse|all] [--heads 16 128] [--batch 4]
                   [--keys 1024] [--json FILE] [--csv FILE] [--plot FILE.png]

Every case calls the public op with backend="auto" on random bf16 inputs built on the GPU (shuffled lookup
tables; the decode plan is built once, outside the timed region). Rows say which backend ran: where an op has
no Triton kernel yet, "auto" runs the float32 reference, which is timed only for small cases. Baselines in the
same run: cuDNN attention (prefill), torch.matmul on the same GEMM (decompress, cache-write), and the reference
(small cases). See BENCHMARKS.md for how to read the table.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import gc
import json
import math
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from pathlib import Path

import torch

from .testing import flops as fl
from .testing import perf
from .testing.shapes import SUITES, BenchCase, cases, override_cases

__all__ = ["build_parser", "main", "provenance", "select_cases"]

ROW_FIELDS = ("suite", "case", "model", "impl", "backend", "status", "batch", "keys", "heads", "query_tokens",
              "topk", "cache_prefix", "page_size", "kv_dtype", "flops", "bytes", "median_us", "p20_us", "p80_us",
              "tflops", "gbps", "roofline_frac", "bound", "method", "copies", "samples", "note")
PROVENANCE_FIELDS = ("gpu", "sm_count", "torch", "triton", "cuda", "python", "commit", "date", "copy_tb_per_s",
                     "matmul_tflop_per_s")
_REF_NOTE = "no Triton kernel for this call yet: 'auto' runs the float32 reference"


def _ints(values: Sequence[str] | None, flag: str) -> list[int] | None:
    """`--batch 4 8`, `--batch 4,8` and `--batch 4 --batch 8` all give [4, 8]."""
    if values is None:
        return None
    out = []
    for item in values:
        for part in str(item).split(","):
            if not part:
                continue
            try:
                value = int(part)
            except ValueError:
                raise ValueError(f"Invalid {flag}: expected positive integers, got {part!r}") from None
            if value < 1:
                raise ValueError(f"Invalid {flag}: expected positive integers, got {value}")
            out.append(value)
    return out or None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pagedmla bench", description="Time pagedmla's ops on a CUDA device against the copy and matmul "
        "ceilings measured in the same run (see BENCHMARKS.md).")
    p.add_argument("suite", nargs="?", default="all", choices=("all",) + SUITES, help="which cases (default: all)")
    sizes = p.add_argument_group("sizes (each replaces that field of every registered case; lists give the product)")
    sizes.add_argument("--heads", nargs="+", action="extend", metavar="H", help="query heads (16, 64, 128)")
    sizes.add_argument("--batch", nargs="+", action="extend", metavar="B", help="sequences")
    sizes.add_argument("--keys", nargs="+", action="extend", metavar="N",
                       help="keys per sequence (decode, mtp, sparse), prompt length (prefill: drops the cached "
                            "prefix), tokens per sequence (decompress, cache-write)")
    sizes.add_argument("--query-tokens", nargs="+", action="extend", metavar="Q", help="query tokens per sequence")
    sizes.add_argument("--topk", nargs="+", action="extend", metavar="K", help="sparse: keys per query token "
                       "(capped at --keys)")
    sizes.add_argument("--page-size", nargs="+", action="extend", metavar="P", help="tokens per page (64)")
    sizes.add_argument("--kv-dtype", nargs="+", action="extend", choices=("bf16", "fp8"),
                       help="cache of decode/mtp/sparse: bf16 or the rope-aware FP8 row")
    out = p.add_argument_group("output")
    out.add_argument("--json", metavar="FILE", help="write rows with provenance as JSON")
    out.add_argument("--csv", metavar="FILE", help="write rows with provenance as CSV")
    out.add_argument("--plot", metavar="FILE.png", help="roofline plot (needs matplotlib)")
    out.add_argument("--list", action="store_true", help="print the selected cases with FLOPs and bytes; no timing")
    out.add_argument("--commit", metavar="REV", help="the commit to record instead of git's HEAD (for a copy of "
                     "the tree whose .git is missing or not the tree's own, as a remote runner's may be)")
    run = p.add_argument_group("timing")
    run.add_argument("--warmup-ms", type=float, default=25.0, help="warm-up per case (default 25)")
    run.add_argument("--rep-ms", type=float, default=100.0, help="measuring time per case (default 100)")
    run.add_argument("--no-graph", action="store_true", help="time single calls with CUDA events only")
    run.add_argument("--no-baselines", action="store_true", help="skip cuDNN and torch.matmul baselines")
    run.add_argument("--no-reference", action="store_true", help="never time the float32 reference")
    run.add_argument("--reference-max-gflop", type=float, default=20.0,
                     help="time the reference only for cases up to this many GFLOP (default 20)")
    return p


def select_cases(args: argparse.Namespace) -> list[BenchCase]:
    """The registry's cases of the chosen suite with the command line's size overrides applied."""
    kv_dtype = list(dict.fromkeys(args.kv_dtype)) if args.kv_dtype else None
    return override_cases(
        cases(args.suite), heads=_ints(args.heads, "--heads"), batch=_ints(args.batch, "--batch"),
        keys=_ints(args.keys, "--keys"), query_tokens=_ints(args.query_tokens, "--query-tokens"),
        topk=_ints(args.topk, "--topk"), page_size=_ints(args.page_size, "--page-size"), kv_dtype=kv_dtype)


@dataclass
class _Spec:
    """One timed implementation of a case. `make(i)` builds input copy i and returns (call, output to check);
    `make is None` marks a row that is reported but not timed (`note` says why)."""

    impl: str
    backend: str
    cost: fl.Cost
    make: Callable[[int], tuple[Callable[[], object], torch.Tensor | None]] | None
    note: str = ""


def _gen(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _randn(shape, gen, device, scale: float = 1.0) -> torch.Tensor:
    """Random bf16 (never zeros: a kernel that skips work must not look right by accident)."""
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)
    return t.mul_(scale) if scale != 1.0 else t


def _softmax_scale(case: BenchCase) -> float:
    return 1.0 / math.sqrt(case.model.qk_head_dim)


def _mla_cache(case: BenchCase, keys: int, new: int, device, gen, *, fp8: bool = False):
    """A paged MLA cache of `batch` sequences with `keys` random rows each (`new` of them this step's tokens),
    blocks handed out in a shuffled order."""
    import pagedmla as pm

    m, ps, batch = case.model, case.page_size, case.batch
    pages = -(-keys // ps)
    params = pm.KVCacheParams(1, m.head_size, True, ps, 1, torch.bfloat16)
    num_blocks = batch * pages
    blocks = _randn(params.block_shape(num_blocks), gen, device)
    table = torch.randperm(num_blocks, generator=gen, device=device).to(torch.int32).view(batch, pages)
    lengths = torch.full((batch,), keys - new, dtype=torch.int32, device=device)
    kv = pm.PagedKVCacheCollection(blocks, lengths, table, params, max_seq_length=new, max_cache_length=keys)
    if fp8:
        kv = pm.quantize_kv_cache(kv, rope_aware=True, qk_rope_head_dim=m.qk_rope_head_dim)
    return kv, pm.row_offsets([new] * batch, device=device)


def _resolve(op: str, impl: str, device, features=frozenset()) -> str:
    from .ops import _dispatch

    return _dispatch.resolve(op, "reference" if impl == "reference" else "auto", device, frozenset(features))


def _decode_make(case: BenchCase, backend: str, device, sparse: bool):
    import pagedmla as pm

    m, fp8 = case.model, case.kv_dtype == "fp8"
    n, batch, tokens = case.query_tokens, case.batch, case.tokens
    call_backend = "reference" if backend == "reference" else "auto"

    def make(i: int):
        gen = _gen(device, 1000 + i)
        kv, iro = _mla_cache(case, case.keys, n, device, gen, fp8=fp8)
        q = _randn((tokens, m.num_heads, m.head_size), gen, device)
        out = torch.empty((tokens, m.num_heads, m.kv_lora_rank), dtype=torch.bfloat16, device=device)
        kw = {"output": out, "per_token_scale_rope_aware": fp8, "qk_rope_head_dim": m.qk_rope_head_dim,
              "backend": call_backend}
        if sparse:
            # Per query token, topk distinct positions of its sequence, as physical rows.
            pos = torch.rand((tokens, case.keys), generator=gen, device=device).argsort(dim=1)[:, :case.topk]
            seq = torch.arange(tokens, device=device) // n
            block = kv.lookup_table.long()[seq.unsqueeze(1), pos // case.page_size]
            kw.update(mask="null", indices=(block * case.page_size + pos % case.page_size).to(torch.int32),
                      topk_lengths=torch.full((batch,), case.topk, dtype=torch.int32, device=device))
        else:
            kw.update(mask="causal")
        kw["plan"] = pm.mla_decode_plan(iro, kv, num_heads=m.num_heads, backend=backend)
        return partial(pm.mla_decode_kv_cache_ragged, q, iro, kv, 0, _softmax_scale(case), **kw), out

    return make


def _prefill_make(case: BenchCase, backend: str, device):
    import pagedmla as pm

    m, batch = case.model, case.batch
    keys = case.cache_prefix + case.keys
    aligned = -(-keys // case.page_size) * case.page_size
    per_head = m.qk_nope_head_dim + m.v_head_dim

    def make(i: int):
        gen = _gen(device, 2000 + i)
        kv, iro = _mla_cache(case, keys, case.keys, device, gen)
        # The whole step is one decompressed chunk: page-aligned rows per sequence, as mla_prefill_plan lays them.
        bro = pm.row_offsets([aligned] * batch, device=device)
        co = torch.zeros(batch, dtype=torch.int32, device=device)
        kbuf = _randn((batch * aligned, m.num_heads, per_head), gen, device)
        q = _randn((case.tokens, m.num_heads, m.qk_head_dim), gen, device)
        out = torch.empty((case.tokens, m.num_heads, m.v_head_dim), dtype=torch.bfloat16, device=device)
        call = partial(pm.mla_prefill_kv_cache_ragged, q, kbuf[..., :m.qk_nope_head_dim],
                       kbuf[..., m.qk_nope_head_dim:], bro, co, iro, kv, 0, _softmax_scale(case), mask="causal",
                       output=out, backend="reference" if backend == "reference" else "auto")
        return call, out

    return make


def _cudnn_make(case: BenchCase, device):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    m, batch, length = case.model, case.batch, case.keys

    def make(i: int):
        gen = _gen(device, 3000 + i)
        q = _randn((batch, m.num_heads, length, m.qk_head_dim), gen, device)
        k = _randn((batch, m.num_heads, length, m.qk_head_dim), gen, device)
        v = _randn((batch, m.num_heads, length, m.v_head_dim), gen, device)

        def call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return sdpa(q, k, v, is_causal=True, scale=_softmax_scale(case))

        return call, None

    return make


def _decompress_make(case: BenchCase, backend: str, device):
    import pagedmla as pm

    m, batch, rows = case.model, case.batch, case.batch * case.keys

    def make(i: int):
        gen = _gen(device, 4000 + i)
        kv, _ = _mla_cache(case, case.keys, 0, device, gen)
        bro = pm.row_offsets([case.keys] * batch, device=device)
        co = torch.zeros(batch, dtype=torch.int32, device=device)
        weight = _randn((m.kv_b_proj_rows, m.kv_lora_rank), gen, device, 1 / math.sqrt(m.kv_lora_rank))
        latent = torch.empty((rows, m.kv_lora_rank), dtype=torch.bfloat16, device=device)
        kbuf = torch.empty((rows, m.kv_b_proj_rows), dtype=torch.bfloat16, device=device)
        call = partial(pm.mla_decompress_k_cache_ragged_paged, bro, co, rows, weight, kv, 0, latent, kbuf,
                       backend="reference" if backend == "reference" else "auto")
        return call, kbuf

    return make


def _cache_write_make(case: BenchCase, backend: str, device):
    import pagedmla as pm

    m = case.model

    def make(i: int):
        gen = _gen(device, 5000 + i)
        kv, iro = _mla_cache(case, case.keys, case.keys, device, gen)
        hidden = _randn((case.tokens, m.hidden_size), gen, device)
        weight = _randn((m.head_size, m.hidden_size), gen, device, 1 / math.sqrt(m.hidden_size))
        call = partial(pm.k_matmul_ragged_paged, hidden, iro, weight, kv, 0,
                       backend="reference" if backend == "reference" else "auto")
        return call, kv.blocks

    return make


def _matmul_make(m_rows: int, n_cols: int, k_inner: int, device):
    """torch.matmul of `[m, k] @ [n, k].T` into a preallocated `[m, n]` (nn.Linear orientation)."""

    def make(i: int):
        gen = _gen(device, 6000 + i)
        a = _randn((m_rows, k_inner), gen, device)
        w = _randn((n_cols, k_inner), gen, device, 1 / math.sqrt(k_inner))
        c = torch.empty((m_rows, n_cols), dtype=torch.bfloat16, device=device)
        return partial(torch.matmul, a, w.t(), out=c), c

    return make


def _op_and_features(case: BenchCase) -> tuple[str, frozenset[str]]:
    if case.suite in ("decode", "mtp", "sparse"):
        feats = {"fp8_cache", "rope_aware"} if case.kv_dtype == "fp8" else set()
        op = "mla_sparse_decode" if case.suite == "sparse" else "mla_decode_kv_cache_ragged"
        return op, frozenset(feats)
    return {"prefill": "mla_prefill_kv_cache_ragged", "decompress": "mla_decompress_k_cache_ragged_paged",
            "cache-write": "k_matmul_ragged_paged"}[case.suite], frozenset()


def _ours_make(case: BenchCase, backend: str, device):
    if case.suite in ("decode", "mtp", "sparse"):
        return _decode_make(case, backend, device, case.suite == "sparse")
    return {"prefill": _prefill_make, "decompress": _decompress_make,
            "cache-write": _cache_write_make}[case.suite](case, backend, device)


def case_specs(case: BenchCase, device, *, baselines: bool = True, reference: bool = True,
               reference_max_flops: float = 2e10) -> list[_Spec]:
    """What one case times: pagedmla with backend="auto", the reference when small, and the torch baselines."""
    device = torch.device(device)
    cost = case.cost()
    op, feats = _op_and_features(case)
    chosen = _resolve(op, "pagedmla", device, feats)
    small = cost.flops <= reference_max_flops
    specs = []
    if chosen == "reference" and not (reference and small):
        why = "too large for it" if reference else "--no-reference"
        specs.append(_Spec("pagedmla", chosen, cost, None, f"skipped: {_REF_NOTE}, {why}"))
    else:
        note = _REF_NOTE if chosen == "reference" else ""
        specs.append(_Spec("pagedmla", chosen, cost, _ours_make(case, chosen, device), note))
    if reference and small and chosen != "reference":
        specs.append(_Spec("reference", "reference", cost, _ours_make(case, "reference", device)))
    if not baselines:
        return specs
    m = case.model
    if case.suite == "prefill":
        if case.cache_prefix:
            specs.append(_Spec("cudnn-sdpa", "torch", cost, None, "skipped: no dense baseline with a cached prefix"))
        else:
            sdpa = fl.sdpa_cost(case.batch, case.keys, num_heads=m.num_heads, qk_head_dim=m.qk_head_dim,
                                v_head_dim=m.v_head_dim)
            specs.append(_Spec("cudnn-sdpa", "torch", sdpa, _cudnn_make(case, device)))
    elif case.suite == "decompress":
        rows = case.batch * case.keys
        specs.append(_Spec("torch.matmul", "torch", fl.matmul_cost(rows, m.kv_b_proj_rows, m.kv_lora_rank),
                           _matmul_make(rows, m.kv_b_proj_rows, m.kv_lora_rank, device), "the GEMM alone"))
    elif case.suite == "cache-write":
        specs.append(_Spec("torch.matmul", "torch", fl.matmul_cost(case.tokens, m.head_size, m.hidden_size),
                           _matmul_make(case.tokens, m.head_size, m.hidden_size, device), "the GEMM alone"))
    return specs


def _row(case: BenchCase, spec: _Spec, *, status: str, note: str, timing: perf.Timing | None = None,
         ceilings: perf.Ceilings | None = None) -> dict:
    row = dict.fromkeys(ROW_FIELDS, "")
    row.update(case.params())
    row.update(impl=spec.impl, backend=spec.backend, status=status, flops=spec.cost.flops, bytes=spec.cost.bytes,
               note=note)
    if timing is not None and ceilings is not None:
        sec = timing.median_us * 1e-6
        row.update(median_us=timing.median_us, p20_us=timing.p20_us, p80_us=timing.p80_us,
                   tflops=spec.cost.flops / sec / 1e12, gbps=spec.cost.bytes / sec / 1e9,
                   roofline_frac=perf.roofline_fraction(spec.cost, sec, ceilings),
                   bound=spec.cost.bound(ceilings.copy_bytes_per_s, ceilings.matmul_flops_per_s),
                   method=timing.method, copies=timing.copies, samples=timing.samples)
    return row


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def run_spec(case: BenchCase, spec: _Spec, ceilings: perf.Ceilings, *, l2_bytes: int, warmup_ms: float,
             rep_ms: float, use_cuda_graph: bool) -> dict:
    """Time one spec; a failure becomes an "error" row (the run goes on)."""
    if spec.make is None:
        return _row(case, spec, status="skipped", note=spec.note)
    calls: list = []
    outputs: list = []
    try:
        for i in range(perf.rotation_copies(spec.cost.bytes, l2_bytes)):
            call, out = spec.make(i)
            calls.append(call)
            outputs.append(out)
        torch.cuda.synchronize()
        # The reference reads lengths back to the host, which no graph can capture.
        graph = use_cuda_graph and spec.backend != "reference"
        timing = perf.time_gpu(calls, warmup_ms=warmup_ms, rep_ms=rep_ms, use_cuda_graph=graph)
        status, bad = "ok", ""
        if any(o is not None and o.is_floating_point() and not bool(torch.isfinite(o).all()) for o in outputs):
            status, bad = "nonfinite", "the output holds NaN or Inf"
        return _row(case, spec, status=status, note=_join(bad, spec.note, timing.note), timing=timing,
                    ceilings=ceilings)
    except Exception as exc:  # noqa: BLE001 - one failing case must not lose the rest of the run
        msg = str(exc).splitlines()[0][:200] if str(exc) else ""
        return _row(case, spec, status="error", note=_join(f"{type(exc).__name__}: {msg}", spec.note))
    finally:
        calls.clear()
        outputs.clear()
        gc.collect()
        torch.cuda.empty_cache()


class _Progress:
    """A one-line progress bar on stderr (one line per step when stderr is not a terminal)."""

    def __init__(self, total: int, stream=None, width: int = 24):
        self.total, self.width, self.stream = total, width, stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = 0

    def update(self, done: int, label: str) -> None:
        filled = self.width * done // max(self.total, 1)
        text = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total} {label}"
        if self.tty:
            self.stream.write("\r" + text.ljust(self.last))
            self.last = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False)
        return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def provenance(device=None, commit: str | None = None) -> dict:
    """Where the numbers came from: GPU, library versions, commit (`commit` when given, else git's HEAD) and
    date (UTC)."""
    info = {"gpu": "none", "sm_count": "", "torch": torch.__version__, "triton": _version("triton"),
            "cuda": torch.version.cuda or "", "python": platform.python_version(),
            "commit": commit or _git_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.device("cuda") if device is None else device)
        info.update(gpu=props.name, sm_count=props.multi_processor_count)
    return info


def _fmt(value, spec: str) -> str:
    return "" if value in ("", None) else format(value, spec)


def format_table(rows: Sequence[dict], ceilings: perf.Ceilings | None = None, prov: dict | None = None) -> str:
    """The end-of-run table: one line per row, ratios to the ceilings measured in the same run."""
    lines = []
    if prov:
        lines.append(f"{prov['gpu']} | torch {prov['torch']} | triton {prov['triton']} | commit {prov['commit']} "
                     f"| {prov['date']}")
    if ceilings:
        lines.append(f"ceilings: copy {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s (read + written, "
                     f"{ceilings.copy_method}), "
                     f"bf16 matmul {ceilings.matmul_size}^3 {ceilings.matmul_flops_per_s / 1e12:.0f} TFLOP/s")
    head = ("case", "impl", "backend", "us", "p20-p80 us", "TFLOP/s", "GB/s", "roofline", "bound", "note")
    body = []
    for r in rows:
        spread = f"{r['p20_us']:.1f}-{r['p80_us']:.1f}" if r["p20_us"] != "" else ""
        frac = f"{100 * r['roofline_frac']:.1f}%" if r["roofline_frac"] != "" else r["status"]
        note = r["note"] if r["status"] in ("ok", "skipped") else _join(r["status"], r["note"])
        method = {"cuda-graph": "graph", "cuda-events": "events"}.get(r["method"], "")
        backend = f"{r['backend']}/{method}" if method else r["backend"]
        body.append((r["case"], r["impl"], backend, _fmt(r["median_us"], ".1f"), spread, _fmt(r["tflops"], ".1f"),
                     _fmt(r["gbps"], ".0f"), frac, r["bound"], note))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for cells in (head, *body):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(cells[:-1], widths[:-1])) + "  " + str(cells[-1]))
    return "\n".join(line.rstrip() for line in lines)


def _with_provenance(rows: Sequence[dict], prov: dict, ceilings: perf.Ceilings | None) -> list[dict]:
    extra = {k: prov.get(k, "") for k in PROVENANCE_FIELDS}
    if ceilings is not None:
        extra.update(copy_tb_per_s=ceilings.copy_bytes_per_s / 1e12,
                     matmul_tflop_per_s=ceilings.matmul_flops_per_s / 1e12)
    return [{**r, **extra} for r in rows]


def _open_for_write(path: str):
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    return p.open("w", newline="")


def write_json(path: str, rows, prov: dict, ceilings: perf.Ceilings | None) -> None:
    doc = {"provenance": prov, "ceilings": ceilings.as_dict() if ceilings else None,
           "rows": _with_provenance(rows, prov, ceilings)}
    with _open_for_write(path) as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def write_csv(path: str, rows, prov: dict, ceilings: perf.Ceilings | None) -> None:
    with _open_for_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(ROW_FIELDS) + list(PROVENANCE_FIELDS))
        writer.writeheader()
        writer.writerows(_with_provenance(rows, prov, ceilings))


def write_plot(path: str, rows, ceilings: perf.Ceilings, prov: dict) -> bool:
    """A roofline plot (TFLOP/s against FLOP/byte with the two measured ceilings); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    timed = [r for r in rows if r["tflops"] != "" and r["flops"] and r["bytes"]]
    fig, ax = plt.subplots(figsize=(10, 6.5))
    bw, mm = ceilings.copy_bytes_per_s / 1e12, ceilings.matmul_flops_per_s / 1e12
    lo = min([r["flops"] / r["bytes"] for r in timed] + [1.0]) / 2
    hi = max([r["flops"] / r["bytes"] for r in timed] + [4 * mm / bw]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(mm, bw * x) for x in xs], color="black", lw=1.5,
            label=f"roofline: copy {bw:.2f} TB/s, matmul {mm:.0f} TFLOP/s")
    markers = {"pagedmla": "o", "pagedmla (reference)": "+", "reference": "x", "cudnn-sdpa": "s",
               "torch.matmul": "^"}

    def label(r):
        # A pagedmla row that ran the reference measures the oracle, not a kernel.
        return "pagedmla (reference)" if r["impl"] == "pagedmla" and r["backend"] == "reference" else r["impl"]

    for impl in dict.fromkeys(label(r) for r in timed):
        pts = [r for r in timed if label(r) == impl]
        ax.scatter([r["flops"] / r["bytes"] for r in pts], [r["tflops"] for r in pts],
                   marker=markers.get(impl, "D"), label=impl, zorder=3)
        for r in pts:
            ax.annotate(r["case"], (r["flops"] / r["bytes"], r["tflops"]), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"pagedmla on {prov['gpu']} ({prov['commit']}, {prov['date'][:10]})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=150)
    plt.close(fig)
    return True


def _list_cases(selected: Sequence[BenchCase]) -> str:
    lines = [f"{'case':40s} {'GFLOP':>10s} {'MB':>10s} {'FLOP/B':>8s}"]
    for c in selected:
        cost = c.cost()
        lines.append(f"{c.name:40s} {cost.flops / 1e9:10.2f} {cost.bytes / 1e6:10.2f} {cost.intensity:8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `pagedmla bench`; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        selected = select_cases(args)
    except ValueError as exc:
        print(f"pagedmla bench: error: {exc}", file=sys.stderr)
        return 2
    if args.list:
        print(_list_cases(selected))
        return 0
    if not torch.cuda.is_available():
        print("pagedmla bench: no CUDA device (torch.cuda.is_available() is False). The benchmarks time GPU "
              "kernels and report nothing without one; run them on a machine with an NVIDIA GPU "
              "(`--list` shows the cases and their FLOPs and bytes).", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    torch.manual_seed(0)
    prov = provenance(device, commit=args.commit)
    progress = _Progress(len(selected) + 1)
    progress.update(0, "ceilings: copy and matmul")
    ceilings = perf.measure_ceilings(device=device)
    l2 = perf.l2_cache_bytes(device)
    rows = []
    for i, case in enumerate(selected):
        # Steps done so far: the ceilings and i cases.
        progress.update(i + 1, case.name)
        for spec in case_specs(case, device, baselines=not args.no_baselines, reference=not args.no_reference,
                               reference_max_flops=args.reference_max_gflop * 1e9):
            rows.append(run_spec(case, spec, ceilings, l2_bytes=l2, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
                                 use_cuda_graph=not args.no_graph))
    progress.update(len(selected) + 1, "done")
    progress.close()
    print(format_table(rows, ceilings, prov))
    if args.json:
        write_json(args.json, rows, prov, ceilings)
    if args.csv:
        write_csv(args.csv, rows, prov, ceilings)
    if args.plot and not write_plot(args.plot, rows, ceilings, prov):
        print("pagedmla bench: matplotlib is not installed; no plot written (pip install 'pagedmla[bench]')",
              file=sys.stderr)
    return 0 if all(r["status"] in ("ok", "skipped") for r in rows) else 3


if __name__ == "__main__":
    sys.exit(main())
