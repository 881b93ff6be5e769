"""Benchmark shapes: the models (DeepSeek-V3 at 128 heads, its TP8 slice at 16, Kimi-K2 at 64) and the cases of
every suite, taken from PERF.md's tables so our numbers line up with the ones to beat.

A case's fields mean, per suite:
- decode / mtp / sparse: `batch` sequences, `keys` = N_b keys per sequence (cached before the step plus the
  `query_tokens` new ones), `topk` keys gathered per query token (sparse);
- prefill: `batch` prompts of `keys` new tokens on top of `cache_prefix` cached tokens;
- decompress: `batch` sequences of `keys` cached tokens, all gathered into one buffer;
- cache-write: `batch` sequences of `keys` new tokens projected into the cache (`kv_a_proj_with_mqa`).

>>> [c.name for c in cases("prefill")][:1]
['prefill B1 L8192 H128']
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from . import flops

__all__ = [
    "MODELS",
    "SUITES",
    "BenchCase",
    "ModelShape",
    "cases",
    "model_for_heads",
    "override_cases",
]

SUITES = ("decode", "mtp", "prefill", "decompress", "cache-write", "sparse")
KV_DTYPES = ("bf16", "fp8")


@dataclass(frozen=True)
class ModelShape:
    """MLA sizes of one model (or of one tensor-parallel slice of it)."""

    name: str
    num_heads: int
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    hidden_size: int = 7168

    @property
    def head_size(self) -> int:
        """Elements of one latent cache row (576)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        """Query/key head size of prefill (192)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_b_proj_rows(self) -> int:
        """Rows of `kv_b_proj.weight`: K-nope and V of every head (`H * 256`)."""
        return self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)


MODELS = {
    "deepseek-v3": ModelShape("deepseek-v3", 128),
    "deepseek-v3-tp8": ModelShape("deepseek-v3-tp8", 16),
    "kimi-k2": ModelShape("kimi-k2", 64),
}


def model_for_heads(num_heads: int) -> ModelShape:
    """The registered model with that many query heads, else DeepSeek-V3's sizes at `num_heads` heads."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"Invalid num_heads: expected an int >= 1, got {num_heads!r}")
    for model in MODELS.values():
        if model.num_heads == num_heads:
            return model
    return ModelShape(f"deepseek-v3-h{num_heads}", num_heads)


@dataclass(frozen=True)
class BenchCase:
    """One benchmark point. See the module docstring for what `batch` and `keys` count in each suite."""

    suite: str
    model: ModelShape
    batch: int
    keys: int
    query_tokens: int = 1
    topk: int = 0
    cache_prefix: int = 0
    page_size: int = 64
    kv_dtype: str = "bf16"

    def __post_init__(self):
        if self.suite not in SUITES:
            raise ValueError(f"Invalid suite: expected one of {list(SUITES)}, got {self.suite!r}")
        for name in ("batch", "keys", "query_tokens", "page_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Invalid {name} of a {self.suite} case: expected an int >= 1, got {value!r}")
        if self.cache_prefix < 0 or self.topk < 0:
            raise ValueError(f"Invalid cache_prefix/topk: expected >= 0, got {self.cache_prefix}/{self.topk}")
        if self.suite in ("decode", "mtp", "sparse") and self.query_tokens > self.keys:
            raise ValueError(f"Invalid keys of a {self.suite} case: expected at least query_tokens "
                             f"({self.query_tokens}) keys per sequence, got {self.keys}")
        if self.suite == "sparse" and not 1 <= self.topk <= self.keys:
            raise ValueError(f"Invalid topk of a sparse case: expected 1 <= topk <= keys ({self.keys}), "
                             f"got {self.topk}")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"Invalid kv_dtype: expected one of {list(KV_DTYPES)}, got {self.kv_dtype!r}")
        if self.kv_dtype == "fp8" and self.suite not in ("decode", "mtp", "sparse"):
            raise ValueError(f"Invalid kv_dtype for {self.suite}: expected 'bf16' (FP8 caches are benchmarked "
                             f"in decode, mtp and sparse), got 'fp8'")

    @property
    def num_heads(self) -> int:
        return self.model.num_heads

    @property
    def tokens(self) -> int:
        """Query tokens of the step (T): rows of q in attention, rows of hidden_state in the cache write."""
        if self.suite in ("prefill", "cache-write"):
            return self.batch * self.keys
        if self.suite == "decompress":
            return 0
        return self.batch * self.query_tokens

    @property
    def name(self) -> str:
        b, h = f"B{self.batch}", f"H{self.num_heads}"
        fp8 = " fp8" if self.kv_dtype == "fp8" else ""
        if self.suite == "prefill":
            prefix = f"+{self.cache_prefix}" if self.cache_prefix else ""
            return f"prefill {b} L{self.keys}{prefix} {h}"
        if self.suite == "decompress":
            return f"decompress {b} N{self.keys} {h}"
        if self.suite == "cache-write":
            return f"cache-write {b} n{self.keys} K{self.model.hidden_size}"
        if self.suite == "sparse":
            return f"sparse {b} q{self.query_tokens} topk{self.topk} N{self.keys} {h}{fp8}"
        q = f" q{self.query_tokens}" if self.query_tokens > 1 else ""
        return f"{self.suite} {b}{q} N{self.keys} {h}{fp8}"

    def params(self) -> dict:
        """The case's sizes as plain values (benchmark rows and JSON files)."""
        return {"suite": self.suite, "case": self.name, "model": self.model.name, "batch": self.batch,
                "keys": self.keys, "heads": self.num_heads, "query_tokens": self.query_tokens, "topk": self.topk,
                "cache_prefix": self.cache_prefix, "page_size": self.page_size, "kv_dtype": self.kv_dtype}

    @property
    def cache_row_bytes(self) -> int:
        """Bytes of one cache row: bf16 576 * 2, or the rope-aware FP8 row (512 + 2 * 64) plus its scale."""
        m = self.model
        if self.kv_dtype == "fp8":
            return m.kv_lora_rank + 2 * m.qk_rope_head_dim + 4
        return 2 * m.head_size

    def cost(self) -> flops.Cost:
        """FLOPs and bytes of one call of the pagedmla operation this case times."""
        m = self.model
        if self.suite in ("decode", "mtp"):
            return flops.decode_cost([self.query_tokens] * self.batch, [self.keys - self.query_tokens] * self.batch,
                                     num_heads=m.num_heads, head_size=m.head_size, kv_lora_rank=m.kv_lora_rank,
                                     cache_row_bytes=self.cache_row_bytes)
        if self.suite == "sparse":
            return flops.sparse_decode_cost(self.tokens, num_heads=m.num_heads, topk=self.topk,
                                            head_size=m.head_size, kv_lora_rank=m.kv_lora_rank,
                                            cache_row_bytes=self.cache_row_bytes)
        if self.suite == "prefill":
            return flops.prefill_cost([self.keys] * self.batch, [self.cache_prefix] * self.batch,
                                      num_heads=m.num_heads, qk_head_dim=m.qk_head_dim, v_head_dim=m.v_head_dim,
                                      qk_rope_head_dim=m.qk_rope_head_dim)
        if self.suite == "decompress":
            return flops.decompress_cost(self.batch * self.keys, out_features=m.kv_b_proj_rows,
                                         kv_lora_rank=m.kv_lora_rank)
        return flops.cache_write_cost(self.tokens, in_features=m.hidden_size, out_features=m.head_size)


_V3, _TP8, _KIMI = MODELS["deepseek-v3"], MODELS["deepseek-v3-tp8"], MODELS["kimi-k2"]
# PERF.md, dense decode: (B, N) at 128 and 16 heads.
_DECODE_POINTS = ((1, 16384), (16, 4096), (64, 4096), (128, 4096), (128, 8192), (32, 32768))


def _registry() -> dict[str, list[BenchCase]]:
    decode = [BenchCase("decode", m, b, n) for m in (_V3, _TP8) for b, n in _DECODE_POINTS]
    mtp = [BenchCase("mtp", _V3, 64, 4096, query_tokens=2), BenchCase("mtp", _V3, 128, 4096, query_tokens=2),
           BenchCase("mtp", _V3, 64, 4096, query_tokens=4), BenchCase("mtp", _TP8, 64, 4096, query_tokens=4),
           BenchCase("mtp", _TP8, 64, 4096, query_tokens=2)]
    # PERF.md's cuDNN table, plus one chunked-prefill step on a cached prefix (no dense baseline there).
    prefill = [BenchCase("prefill", _V3, 1, 8192), BenchCase("prefill", _V3, 4, 4096),
               BenchCase("prefill", _V3, 16, 1024), BenchCase("prefill", _TP8, 2, 4096),
               BenchCase("prefill", _V3, 4, 1024, cache_prefix=3072)]
    # 16384 x 512 @ 512 x 32768 at 128 heads and 4096 x 512 @ 512 x 4096 at 16 heads.
    decompress = [BenchCase("decompress", _V3, 4, 4096), BenchCase("decompress", _TP8, 1, 4096)]
    # k-projection 4096 x 7168 @ 7168 x 576 (a prompt) and 256 x 7168 @ 7168 x 576 (a decode step).
    cache_write = [BenchCase("cache-write", _V3, 1, 4096), BenchCase("cache-write", _V3, 256, 1)]
    # FP8 sparse decode of DeepSeek-V3.2 (rope-aware rows), two query tokens, topk 2048.
    sparse = [BenchCase("sparse", m, b, 8192, query_tokens=2, topk=2048, kv_dtype="fp8")
              for m, b in ((_V3, 64), (_V3, 128), (_KIMI, 64))]
    return {"decode": decode, "mtp": mtp, "prefill": prefill, "decompress": decompress,
            "cache-write": cache_write, "sparse": sparse}


def cases(suite: str = "all") -> list[BenchCase]:
    """The registered cases of one suite, or of every suite for "all"."""
    reg = _registry()
    if suite == "all":
        return [c for s in SUITES for c in reg[s]]
    if suite not in reg:
        raise ValueError(f"Invalid suite: expected 'all' or one of {list(SUITES)}, got {suite!r}")
    return list(reg[suite])


def _one(case: BenchCase, heads, batch, keys, query_tokens, topk, page_size, kv_dtype) -> BenchCase:
    changes: dict = {}
    # The cache write does not depend on the number of query heads.
    if heads is not None and case.suite != "cache-write":
        changes["model"] = model_for_heads(heads)
    for name, value in (("batch", batch), ("keys", keys), ("page_size", page_size)):
        if value is not None:
            changes[name] = value
    if query_tokens is not None and case.suite in ("decode", "mtp", "sparse"):
        changes["query_tokens"] = query_tokens
    if kv_dtype is not None and case.suite in ("decode", "mtp", "sparse"):
        changes["kv_dtype"] = kv_dtype
    if case.suite == "sparse":
        new_keys = changes.get("keys", case.keys)
        # A smaller cache than the registry's topk: gather every key.
        changes["topk"] = min(topk if topk is not None else case.topk, new_keys)
    if case.suite == "prefill" and (batch is not None or keys is not None):
        changes["cache_prefix"] = case.cache_prefix if keys is None else 0
    return replace(case, **changes)


def override_cases(base: Sequence[BenchCase], *, heads: Sequence[int] | None = None,
                   batch: Sequence[int] | None = None, keys: Sequence[int] | None = None,
                   query_tokens: Sequence[int] | None = None, topk: Sequence[int] | None = None,
                   page_size: Sequence[int] | None = None, kv_dtype: Sequence[str] | None = None) -> list[BenchCase]:
    """Replace fields of every case by each of the given values (the product of the given lists), dropping
    duplicates and keeping order. `bench decode --heads 16 --batch 4 --keys 1024` is one case.

    >>> [c.name for c in override_cases(cases("decode"), heads=[16], batch=[4], keys=[1024])]
    ['decode B4 N1024 H16']
    """
    lists = [heads, batch, keys, query_tokens, topk, page_size, kv_dtype]
    choices = [list(v) if v else [None] for v in lists]
    out: list[BenchCase] = []
    seen: set[BenchCase] = set()
    for case in base:
        for combo in itertools.product(*choices):
            new = _one(case, *combo)
            if new not in seen:
                seen.add(new)
                out.append(new)
    return out
