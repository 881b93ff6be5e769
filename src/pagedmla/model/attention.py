"""DeepSeek-V2/V3 Multi-head Latent Attention over the paged latent cache, built only on pagedmla's ops.

One layer's forward on a ragged step (prompt chunks first, then generated tokens):

1. `k_matmul_ragged_paged`: `kv_a_proj_with_mqa(x)` (latent + rope key) goes straight into the cache rows.
2. `rms_norm_key_cache`: `kv_a_layernorm` on the latent columns, in place.
3. `fused_qk_rope_ragged`: rope on `q_rope` and, in place, on the cache's rope columns.
4. prompt tokens: `mla_prefill` (plan, decompress through `kv_b_proj`, attend chunk by chunk) with
   `q = [q_nope, q_rope]`; generated tokens: absorbed decode, `q = [q_nope @ W_UK, q_rope]` `[T, H, 576]`
   into `mla_decode_kv_cache_ragged` (one plan per step, shared by all layers), then `@ W_UV`.
5. `o_proj`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import ops as pm
from ..cache import PagedKVCacheCollection, row_offsets
from ..ops import _dispatch
from ..reference.cache_write import rope_rotate
from .rope import rope_freqs_cis, softmax_scale

__all__ = ["OP_NAMES", "AttentionBatch", "MLAttention", "RMSNorm", "resolve_backends"]

# The ops one layer calls; a backend mapping names any of them (missing ones mean "auto").
OP_NAMES = ("k_matmul_ragged_paged", "rms_norm_key_cache", "fused_qk_rope_ragged", "mla_prefill",
            "mla_decode_plan", "mla_decode_kv_cache_ragged")
# mla_prefill drives these three with one backend argument.
_PREFILL_PARTS = ("mla_prefill_plan", "mla_decompress_k_cache_ragged_paged", "mla_prefill_kv_cache_ragged")

Backend = str | Mapping[str, str]


def _backend_of(backend: Backend, op: str) -> str:
    return backend if isinstance(backend, str) else backend.get(op, "auto")


def _decode_features(dtype: torch.dtype) -> frozenset[str]:
    return frozenset({"fp32"}) if dtype == torch.float32 else frozenset()


def resolve_backends(backend: str, device, dtype: torch.dtype) -> dict[str, str]:
    """The backend each op of a layer runs on: `backend` where it can, the reference elsewhere.

    `"triton"` keeps Triton for the ops that have a kernel for this call (on CPU that needs
    `TRITON_INTERPRET=1`) and names "reference" for the rest, so a caller can say which ran where;
    "auto" and "reference" resolve as the ops do.
    """
    device = torch.device(device)
    if backend not in ("auto", "reference", "triton"):
        raise ValueError(f"Invalid backend: expected 'auto', 'reference' or 'triton', got {backend!r}")
    if backend == "reference":
        return dict.fromkeys(OP_NAMES, "reference")
    want = "triton" if backend == "triton" else "auto"

    def pick(op: str, features: frozenset[str] = frozenset()) -> str:
        try:
            return _dispatch.resolve(op, want, device, features)
        except (NotImplementedError, ValueError):
            return "reference"

    out = {op: pick(op) for op in OP_NAMES[:3]}
    parts = {pick(op) for op in _PREFILL_PARTS}
    out["mla_prefill"] = "triton" if parts == {"triton"} else "reference"
    decode = pick("mla_decode_kv_cache_ragged", _decode_features(dtype))
    out["mla_decode_kv_cache_ragged"] = decode
    # A Triton decode reads its schedule from a Triton plan; the reference reads nothing but the split.
    out["mla_decode_plan"] = pick("mla_decode_plan") if decode == "triton" else "reference"
    if decode == "triton" and out["mla_decode_plan"] != "triton":
        out["mla_decode_kv_cache_ragged"] = "reference"
    return out


@dataclass
class AttentionBatch:
    """One step's ragged batch, built once and shared by every layer.

    The first `num_prefill` sequences are prompt chunks (prefill path), the rest generated tokens (absorbed
    decode, any number of tokens per sequence for verification). `kv` covers the whole batch (the cache
    writes); `prefill_kv` / `decode_kv` are its two halves.
    """

    kv: PagedKVCacheCollection
    input_row_offsets: Tensor
    num_prefill_rows: int
    prefill_kv: PagedKVCacheCollection | None
    prefill_offsets: Tensor | None
    decode_kv: PagedKVCacheCollection | None
    decode_offsets: Tensor | None
    decode_plan: pm.DecodePlan | None

    @property
    def num_rows(self) -> int:
        return int(self.input_row_offsets[-1])

    @classmethod
    def build(cls, kv: PagedKVCacheCollection, num_new_tokens: Sequence[int], *, num_prefill: int,
              num_heads: int, dtype: torch.dtype = torch.float32, backend: Backend = "auto",
              num_partitions: int | None = None) -> AttentionBatch:
        """Split a step into its prefill and decode halves and build the decode plan (once per step).

        Args:
            kv: the step's collection (`PagedKVCacheManager.step`), sequences in the order of num_new_tokens.
            num_new_tokens: `n_b` per sequence (host ints, all >= 1).
            num_prefill: how many leading sequences take the prefill path.
            num_heads: query heads (sizes the decode schedule: the decode's q must have as many); dtype: the
                activations' dtype.
            backend: a backend for every op, or a mapping op name -> backend (see `resolve_backends`).
        """
        counts = [int(n) for n in num_new_tokens]
        if len(counts) != kv.batch_size:
            raise ValueError(f"Invalid num_new_tokens: expected {kv.batch_size} counts, got {len(counts)}")
        if any(n < 1 for n in counts):
            raise ValueError(f"Invalid num_new_tokens: expected every count >= 1, got {counts}")
        if not 0 <= num_prefill <= len(counts):
            raise ValueError(f"Invalid num_prefill: expected 0..{len(counts)}, got {num_prefill}")
        device = kv.device
        totals = (kv.cache_lengths.long().cpu() + torch.tensor(counts, dtype=torch.long)).tolist()
        offsets = row_offsets(counts, device=device)

        def half(lo: int, hi: int):
            if lo == hi:
                return None, None
            sub = kv.replace(cache_lengths=kv.cache_lengths[lo:hi], lookup_table=kv.lookup_table[lo:hi],
                             max_seq_length=max(counts[lo:hi]), max_cache_length=max(totals[lo:hi]))
            return sub, row_offsets(counts[lo:hi], device=device)

        prefill_kv, prefill_offsets = half(0, num_prefill)
        decode_kv, decode_offsets = half(num_prefill, len(counts))
        plan = None
        if decode_kv is not None:
            if isinstance(backend, str):
                # The plan follows the decode op: a Triton decode needs a Triton plan's schedule.
                plan_backend = _dispatch.resolve("mla_decode_kv_cache_ragged", backend, device,
                                                 _decode_features(dtype))
            else:
                plan_backend = backend.get("mla_decode_plan", "auto")
            plan = pm.mla_decode_plan(decode_offsets, decode_kv, num_heads=num_heads, num_partitions=num_partitions,
                                      backend=plan_backend)
        return cls(kv, offsets, sum(counts[:num_prefill]), prefill_kv, prefill_offsets, decode_kv, decode_offsets,
                   plan)


class RMSNorm(nn.Module):
    """`x * rsqrt(mean(x^2) + eps) * weight` in float32 (DeepSeek's q_a_layernorm / kv_a_layernorm)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        return (self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
                .to(x.dtype))


class MLAttention(nn.Module):
    """DeepSeek-V2/V3 MLA whose attention runs on pagedmla's paged-cache ops.

    Args:
        hidden_size, num_heads: model width and query heads (any H >= 1).
        kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim: DeepSeek's sizes (512, 128, 64, 128);
            the cache row is `kv_lora_rank + qk_rope_head_dim` wide.
        q_lora_rank: None for a direct `q_proj` (V2-Lite), else the `q_a_proj -> q_a_layernorm -> q_b_proj` path.
        freqs_cis: rope table float `[max_positions, qk_rope_head_dim]` (`rope.rope_freqs_cis`).
        softmax_scale: None for `(qk_nope_head_dim + qk_rope_head_dim) ** -0.5` (pass the YaRN-corrected one).
        rope_interleaved: True for DeepSeek's interleaved pairs (HF `rope_interleave`), False for half split.
        q_norm_eps, kv_norm_eps: epsilons of q_a_layernorm / kv_a_layernorm.
        attention_bias: biases on q_a_proj / q_proj, kv_a_proj_with_mqa and o_proj.
        layer_idx: the cache layer this attention reads and writes.
        backend: one backend for every op, or a mapping op name -> backend (`resolve_backends`).
        prefill_buffer_size: rows of the prefill decompression buffer (longer batches take several chunks).

    >>> attn = MLAttention(32, 2, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
    ...                    freqs_cis=rope_freqs_cis(8, 64))
    >>> attn.cache_head_size
    24
    """

    def __init__(self, hidden_size: int, num_heads: int, *, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int, freqs_cis: Tensor, q_lora_rank: int | None = None,
                 softmax_scale: float | None = None, rope_interleaved: bool = True, q_norm_eps: float = 1e-6,
                 kv_norm_eps: float = 1e-6, attention_bias: bool = False, layer_idx: int = 0,
                 backend: Backend = "auto", prefill_buffer_size: int = 4096, device=None, dtype=None):
        super().__init__()
        if freqs_cis.dim() != 2 or freqs_cis.shape[1] != qk_rope_head_dim:
            raise ValueError(f"Invalid shape of freqs_cis: expected (*, {qk_rope_head_dim}), "
                             f"got {tuple(freqs_cis.shape)}")
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.q_lora_rank = q_lora_rank
        self.qk_head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.softmax_scale = self.qk_head_dim ** -0.5 if softmax_scale is None else float(softmax_scale)
        self.rope_interleaved = bool(rope_interleaved)
        self.layer_idx = layer_idx
        self.backend = backend
        self.prefill_buffer_size = prefill_buffer_size
        kw = {"device": device, "dtype": dtype}
        q_out = num_heads * self.qk_head_dim
        if q_lora_rank is None:
            self.q_proj = nn.Linear(hidden_size, q_out, bias=attention_bias, **kw)
            self.q_a_proj = self.q_a_layernorm = self.q_b_proj = None
        else:
            self.q_proj = None
            self.q_a_proj = nn.Linear(hidden_size, q_lora_rank, bias=attention_bias, **kw)
            self.q_a_layernorm = RMSNorm(q_lora_rank, q_norm_eps).to(**kw)
            self.q_b_proj = nn.Linear(q_lora_rank, q_out, bias=False, **kw)
        self.kv_a_proj_with_mqa = nn.Linear(hidden_size, self.cache_head_size, bias=attention_bias, **kw)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, kv_norm_eps).to(**kw)
        self.kv_b_proj = nn.Linear(kv_lora_rank, num_heads * (qk_nope_head_dim + v_head_dim), bias=False, **kw)
        self.o_proj = nn.Linear(num_heads * v_head_dim, hidden_size, bias=attention_bias, **kw)
        self.register_buffer("freqs_cis", freqs_cis.float().to(device), persistent=False)

    @property
    def cache_head_size(self) -> int:
        """Width of one cache row: `kv_lora_rank + qk_rope_head_dim` (576 for DeepSeek)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @classmethod
    def from_hf(cls, module: nn.Module, *, layer_idx: int | None = None, freqs_cis: Tensor | None = None,
                max_positions: int | None = None, backend: Backend = "auto",
                prefill_buffer_size: int = 4096) -> MLAttention:
        """Wrap a transformers `DeepseekV3Attention` (its modules are shared, not copied).

        The rope table comes from the config (`rope_parameters`, or `rope_theta` / `rope_scaling` in older
        transformers) for `max_positions` (default `max_position_embeddings`) positions; the softmax scale is
        the module's own (`scaling`, YaRN-corrected). `rope_interleave=True` maps to our interleaved pairs:
        HF rotates the pairs (x[2i], x[2i+1]) and writes them de-interleaved for q and k alike, which permutes
        both the same way and so leaves every q.k unchanged.
        """
        config = module.config
        if layer_idx is None:
            layer_idx = module.layer_idx
        rope_params = dict(getattr(config, "rope_parameters", None) or {})
        if not rope_params:
            rope_params = {"rope_theta": getattr(config, "rope_theta", 10000.0),
                           **(getattr(config, "rope_scaling", None) or {})}
        rope_dim = config.qk_rope_head_dim
        if freqs_cis is None:
            freqs_cis = rope_freqs_cis(rope_dim, max_positions or config.max_position_embeddings,
                                       rope_params.get("rope_theta", 10000.0), rope_params,
                                       max_position_embeddings=config.max_position_embeddings)
        scale = getattr(module, "scaling", None)
        if scale is None:
            scale = softmax_scale(config.qk_nope_head_dim + rope_dim, rope_params)
        q_lora_rank = config.q_lora_rank
        weight = module.kv_a_proj_with_mqa.weight
        with torch.device("meta"):
            self = cls(config.hidden_size, config.num_attention_heads, kv_lora_rank=config.kv_lora_rank,
                       qk_nope_head_dim=config.qk_nope_head_dim, qk_rope_head_dim=rope_dim,
                       v_head_dim=config.v_head_dim, freqs_cis=torch.empty(1, rope_dim), q_lora_rank=q_lora_rank,
                       softmax_scale=scale, rope_interleaved=bool(getattr(config, "rope_interleave", True)),
                       attention_bias=bool(getattr(config, "attention_bias", False)), layer_idx=layer_idx,
                       backend=backend, prefill_buffer_size=prefill_buffer_size)
        for name in ("q_proj", "q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm",
                     "kv_b_proj", "o_proj"):
            setattr(self, name, getattr(module, name) if getattr(self, name) is not None else None)
        self.freqs_cis = freqs_cis.float().to(weight.device)
        return self

    def _op_backend(self, op: str) -> str:
        return _backend_of(self.backend, op)

    def _queries(self, x: Tensor) -> Tensor:
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q.view(x.shape[0], self.num_heads, self.qk_head_dim)

    def write_cache(self, x: Tensor, batch: AttentionBatch, q_rope: Tensor) -> Tensor:
        """Project, normalize and rope this step's tokens into the cache; return the roped `q_rope`."""
        kv, offsets, layer = batch.kv, batch.input_row_offsets, self.layer_idx
        weight = self.kv_a_proj_with_mqa.weight
        bias = self.kv_a_proj_with_mqa.bias
        if bias is not None:
            # The cache write is a plain GEMM: fold the bias in as one more input column of ones.
            x = torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)
            weight = torch.cat([weight, bias.unsqueeze(1)], dim=1)
        pm.k_matmul_ragged_paged(x.contiguous(), offsets, weight.contiguous(), kv, layer,
                                 backend=self._op_backend("k_matmul_ragged_paged"))
        pm.rms_norm_key_cache(kv, self.kv_a_layernorm.weight, float(self.kv_a_layernorm.variance_epsilon), layer,
                              offsets, self.kv_lora_rank, backend=self._op_backend("rms_norm_key_cache"))
        return pm.fused_qk_rope_ragged(q_rope.contiguous(), offsets, kv, self.freqs_cis, layer,
                                       self.rope_interleaved, backend=self._op_backend("fused_qk_rope_ragged"))

    def _absorbed_weights(self) -> tuple[Tensor, Tensor]:
        """W_UK `[H, qk_nope_head_dim, kv_lora_rank]` and W_UV `[H, v_head_dim, kv_lora_rank]` (views)."""
        w = self.kv_b_proj.weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        return w[:, : self.qk_nope_head_dim], w[:, self.qk_nope_head_dim:]

    def forward(self, hidden_states: Tensor, batch: AttentionBatch) -> Tensor:
        """`[T, hidden_size]` (the step's ragged tokens, prompt chunks first) -> `[T, hidden_size]`."""
        if hidden_states.dim() != 2 or hidden_states.shape != (batch.num_rows, self.hidden_size):
            raise ValueError(f"Invalid shape of hidden_states: expected ({batch.num_rows}, {self.hidden_size}), "
                             f"got {tuple(hidden_states.shape)}")
        num_rows, split = hidden_states.shape[0], batch.num_prefill_rows
        q = self._queries(hidden_states)
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        q_rope = self.write_cache(hidden_states, batch, q_rope)
        out = hidden_states.new_empty(num_rows, self.num_heads, self.v_head_dim)
        if batch.prefill_kv is not None:
            q_full = torch.cat([q_nope[:split], q_rope[:split]], dim=-1)
            out[:split] = pm.mla_prefill(q_full, batch.prefill_offsets, batch.prefill_kv, self.layer_idx,
                                         self.kv_b_proj.weight, self.softmax_scale,
                                         buffer_size=self.prefill_buffer_size,
                                         backend=self._op_backend("mla_prefill"))
        if batch.decode_kv is not None:
            w_uk, w_uv = self._absorbed_weights()
            # Absorb W_UK into the query: q_nope . (W_UK c) == (q_nope W_UK) . c for every latent row c.
            q_latent = torch.einsum("thd,hdr->thr", q_nope[split:], w_uk)
            q_abs = torch.cat([q_latent, q_rope[split:]], dim=-1)
            latent = pm.mla_decode_kv_cache_ragged(
                q_abs, batch.decode_offsets, batch.decode_kv, self.layer_idx, self.softmax_scale,
                plan=batch.decode_plan, qk_rope_head_dim=self.qk_rope_head_dim,
                backend=self._op_backend("mla_decode_kv_cache_ragged"))
            out[split:] = torch.einsum("thr,hvr->thv", latent, w_uv)
        return self.o_proj(out.reshape(num_rows, self.num_heads * self.v_head_dim))

    def reference_forward(self, hidden_states: Tensor) -> Tensor:
        """Plain unpaged attention of one whole sequence `[N, hidden_size]` (causal), in float32: the oracle
        the layer-only demo and the tests check the paged path against."""
        x = hidden_states.float()
        n = x.shape[0]
        q = self._queries(hidden_states).float()
        q_nope, q_rope = q.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        w = self.kv_a_proj_with_mqa.weight.float()
        ckv = x @ w.T
        if self.kv_a_proj_with_mqa.bias is not None:
            ckv = ckv + self.kv_a_proj_with_mqa.bias.float()
        latent, k_rope = ckv.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        eps = float(self.kv_a_layernorm.variance_epsilon)
        latent = latent * torch.rsqrt(latent.pow(2).mean(-1, keepdim=True) + eps) * self.kv_a_layernorm.weight.float()
        table = self.freqs_cis[:n].float()
        cos, sin = table[:, 0::2], table[:, 1::2]
        q_rope = rope_rotate(q_rope, cos.unsqueeze(1), sin.unsqueeze(1), self.rope_interleaved)
        k_rope = rope_rotate(k_rope, cos, sin, self.rope_interleaved)
        kv = (latent @ self.kv_b_proj.weight.float().T).view(n, self.num_heads, -1)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        logits = (torch.einsum("qhd,khd->hqk", q_nope, k_nope) + torch.einsum("qhd,kd->hqk", q_rope, k_rope))
        logits = logits * self.softmax_scale
        causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
        probs = logits.masked_fill(~causal, -math.inf).softmax(-1)
        out = torch.einsum("hqk,khv->qhv", probs, v).reshape(n, -1)
        w_o = self.o_proj.weight.float()
        y = out @ w_o.T
        if self.o_proj.bias is not None:
            y = y + self.o_proj.bias.float()
        return y
