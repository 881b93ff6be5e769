"""A small paged serving engine: a transformers `DeepseekV3ForCausalLM` whose attention is `MLAttention`.

Every step packs the active requests into one ragged batch over one `PagedKVCacheManager`: prompt chunks
first (long prompts are prefilled over several steps), then the generated tokens of the requests already
decoding. Requests join and finish at any step (continuous batching); a new request whose prompt starts like
a request still held shares that request's full cache pages instead of recomputing them. Decoding is greedy;
with `num_speculative_tokens > 0` each decode step also verifies drafted tokens (prompt-lookup drafts by
default), so a sequence feeds `1 + k` query tokens to the decode op and keeps the longest prefix of drafts
that greedy decoding would have produced, plus one token more: the output equals plain greedy decoding.
MLP / MoE blocks, norms, embeddings and the LM head are transformers' own modules.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..cache import KVCacheParams, PagedKVCacheManager
from .attention import AttentionBatch, Backend, MLAttention

__all__ = ["Engine", "Request", "StepStats", "prompt_lookup_draft"]


def prompt_lookup_draft(tokens: Sequence[int], k: int) -> list[int]:
    """Draft k tokens: what followed the latest earlier occurrence of the last token (else repeat it)."""
    if k <= 0 or not tokens:
        return []
    last = tokens[-1]
    for j in range(len(tokens) - 2, -1, -1):
        if tokens[j] == last:
            follow = list(tokens[j + 1: j + 1 + k])
            return (follow + [last] * k)[:k]
    return [last] * k


@dataclass
class Request:
    """One request's state. The cache holds `prompt + generated[:-1]` once the prompt is prefilled."""

    request_id: Hashable
    prompt: list[int]
    max_new_tokens: int
    generated: list[int] = field(default_factory=list)
    num_cached: int = 0
    num_shared: int = 0
    num_prefill_chunks: int = 0
    drafts_proposed: int = 0
    drafts_accepted: int = 0
    arrival_step: int = 0
    finish_step: int | None = None

    @property
    def in_prefill(self) -> bool:
        return self.num_cached < len(self.prompt)

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated

    @property
    def done(self) -> bool:
        return self.finish_step is not None


@dataclass
class StepStats:
    """What one step did."""

    step: int
    num_sequences: int
    num_prefill_tokens: int
    num_decode_tokens: int
    drafts_proposed: int
    drafts_accepted: int
    pages_in_use: int
    finished: list


class Engine:
    """Serve a transformers `DeepseekV3ForCausalLM` on pagedmla's paged MLA ops.

    Args:
        model: a `DeepseekV3ForCausalLM` (any dtype / device; its attention modules are wrapped, not copied).
        page_size: tokens per cache page; num_blocks: pages in the pool (one page holds every layer).
        max_num_tokens: token budget of one step (decode tokens first, then prompt chunks).
        prefill_chunk_size: most prompt tokens of one request per step (default: max_num_tokens).
        num_speculative_tokens: drafted tokens verified per decode step (0: one token per step).
        draft_fn: `draft_fn(tokens, k) -> k token ids` (default `prompt_lookup_draft`).
        share_prefixes: map a new prompt's common prefix with a held request onto that request's pages.
        backend: one backend for every op, or a mapping op name -> backend (`attention.resolve_backends`).
        prefill_buffer_size: decompression buffer rows of `mla_prefill`.
        max_positions: rope table length (default: the config's max_position_embeddings).
        eos_token_id: stop a request when it generates this token (None: run to max_new_tokens).

    A step that needs more pages than the pool has free raises `pagedmla.OutOfPagesError` (nothing is
    committed; release or finish requests, or build the engine with more blocks).

    >>> engine = Engine(model, page_size=16, num_speculative_tokens=1)        # doctest: +SKIP
    >>> engine.generate([[5, 7, 9], [3, 1, 4, 1, 5]], max_new_tokens=8)        # doctest: +SKIP
    """

    def __init__(self, model, *, page_size: int = 16, num_blocks: int = 256, max_num_tokens: int = 256,
                 prefill_chunk_size: int | None = None, num_speculative_tokens: int = 0,
                 draft_fn: Callable[[Sequence[int], int], list[int]] | None = None, share_prefixes: bool = True,
                 backend: Backend = "auto", prefill_buffer_size: int = 4096, max_positions: int | None = None,
                 eos_token_id: int | None = None):
        config = model.config
        if max_num_tokens < 1 + num_speculative_tokens:
            raise ValueError(f"Invalid max_num_tokens: expected >= 1 + num_speculative_tokens "
                             f"({1 + num_speculative_tokens}), got {max_num_tokens}")
        self.model = model
        self.config = config
        weight = model.lm_head.weight
        self.device, self.dtype = weight.device, weight.dtype
        self.max_positions = max_positions or config.max_position_embeddings
        self.attn = [MLAttention.from_hf(layer.self_attn, layer_idx=i, max_positions=self.max_positions,
                                         backend=backend, prefill_buffer_size=prefill_buffer_size)
                     for i, layer in enumerate(model.model.layers)]
        # One rope table for every layer.
        for attn in self.attn[1:]:
            attn.freqs_cis = self.attn[0].freqs_cis
        params = KVCacheParams(num_heads=1, head_size=self.attn[0].cache_head_size, is_mla=True,
                               page_size=page_size, num_layers=len(self.attn), dtype=self.dtype)
        self.manager = PagedKVCacheManager(params, num_blocks, device=self.device)
        self.backend = backend
        self.max_num_tokens = max_num_tokens
        self.prefill_chunk_size = prefill_chunk_size or max_num_tokens
        self.num_speculative_tokens = num_speculative_tokens
        self.draft_fn = draft_fn or prompt_lookup_draft
        self.share_prefixes = share_prefixes
        self.eos_token_id = eos_token_id
        self.step_count = 0
        self.peak_pages_in_use = 0
        self.pages_shared = 0
        self.waiting: list[Request] = []
        self.active: list[Request] = []
        self.finished: dict[Hashable, Request] = {}
        self._ids = itertools.count()

    @property
    def pages_in_use(self) -> int:
        return self.manager.num_blocks - self.manager.num_free_blocks

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.active)

    def add_request(self, prompt: Sequence[int], max_new_tokens: int, request_id: Hashable | None = None) -> Hashable:
        """Queue a request; it joins the batch at the next step. Returns its id."""
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("Invalid prompt: expected at least one token, got none")
        if max_new_tokens < 1:
            raise ValueError(f"Invalid max_new_tokens: expected >= 1, got {max_new_tokens}")
        if len(prompt) + max_new_tokens > self.max_positions:
            raise ValueError(f"Invalid max_new_tokens: prompt + new tokens must fit in {self.max_positions} "
                             f"positions, got {len(prompt)} + {max_new_tokens}")
        if request_id is None:
            request_id = next(self._ids)
        known = {r.request_id for r in self.waiting + self.active} | set(self.finished)
        if request_id in known:
            raise ValueError(f"Invalid request_id: expected a new id, got {request_id!r}")
        self.waiting.append(Request(request_id, prompt, max_new_tokens, arrival_step=self.step_count))
        return request_id

    def _admit(self, req: Request) -> None:
        source, common = None, 0
        if self.share_prefixes:
            for other in self.active:
                cached = other.tokens[: other.num_cached]
                n = 0
                # Keep one prompt token to prefill: its logits give the first generated token.
                limit = min(len(cached), len(req.prompt) - 1)
                while n < limit and cached[n] == req.prompt[n]:
                    n += 1
                if n > common:
                    source, common = other, n
        if source is not None and common >= self.manager.params.page_size:
            req.num_shared = self.manager.claim(req.request_id, share_prefix_from=source.request_id,
                                                num_shared_tokens=common)
            self.pages_shared += req.num_shared // self.manager.params.page_size
        else:
            self.manager.claim(req.request_id)
        req.num_cached = req.num_shared
        self.active.append(req)

    def _schedule(self) -> tuple[list[tuple[Request, list[int]]], list[tuple[Request, list[int]]]]:
        """This step's (request, tokens) for prompt chunks and for decode (last token + drafts)."""
        budget = self.max_num_tokens
        decode = []
        for req in self.active:
            if req.in_prefill:
                continue
            if budget < 1:
                break
            # Never draft past max_new_tokens: the last accepted draft still earns one more token.
            room = req.max_new_tokens - len(req.generated) - 1
            k = max(0, min(self.num_speculative_tokens, room, budget - 1))
            drafts = self.draft_fn(req.tokens, k) if k else []
            decode.append((req, [req.generated[-1]] + list(drafts)))
            budget -= 1 + len(drafts)
        prefill = []
        for req in self.active:
            if not req.in_prefill or budget <= 0:
                continue
            n = min(len(req.prompt) - req.num_cached, self.prefill_chunk_size, budget)
            prefill.append((req, req.prompt[req.num_cached: req.num_cached + n]))
            budget -= n
        return prefill, decode

    @torch.no_grad()
    def step(self) -> StepStats | None:
        """Admit waiting requests, run one ragged batch through the model, sample greedily, commit."""
        while self.waiting:
            self._admit(self.waiting.pop(0))
        prefill, decode = self._schedule()
        work = prefill + decode
        if not work:
            return None
        ids = [req.request_id for req, _ in work]
        counts = [len(toks) for _, toks in work]
        kv = self.manager.step(ids, counts)
        self.peak_pages_in_use = max(self.peak_pages_in_use, self.pages_in_use)
        batch = AttentionBatch.build(kv, counts, num_prefill=len(prefill), num_heads=self.attn[0].num_heads,
                                     dtype=self.dtype, backend=self.backend)
        tokens = torch.tensor([t for _, toks in work for t in toks], dtype=torch.long, device=self.device)
        # Rows whose logits we need: a prompt's last token, and every decode token (verification).
        starts = list(itertools.accumulate([0] + counts))
        rows: list[int] = []
        for i, (req, toks) in enumerate(work):
            if i < len(prefill):
                if req.num_cached + len(toks) == len(req.prompt):
                    rows.append(starts[i + 1] - 1)
            else:
                rows.extend(range(starts[i], starts[i + 1]))
        logits = self.forward(tokens, batch, rows)
        choice = logits.argmax(-1).tolist()
        commits, finished = [], []
        proposed = accepted = 0
        cursor = 0
        for i, (req, toks) in enumerate(work):
            if i < len(prefill):
                req.num_cached += len(toks)
                req.num_prefill_chunks += 1
                commits.append(len(toks))
                if not req.in_prefill:
                    self._emit(req, [choice[cursor]])
                    cursor += 1
            else:
                picks = choice[cursor: cursor + len(toks)]
                cursor += len(toks)
                drafts = toks[1:]
                keep = 0
                while keep < len(drafts) and drafts[keep] == picks[keep]:
                    keep += 1
                proposed += len(drafts)
                accepted += keep
                req.drafts_proposed += len(drafts)
                req.drafts_accepted += keep
                # Cached now: the fed token and the accepted drafts; rejected rows get overwritten later.
                req.num_cached += 1 + keep
                commits.append(1 + keep)
                self._emit(req, picks[: keep + 1])
            if req.done:
                finished.append(req.request_id)
        self.manager.commit(ids, commits)
        for rid in finished:
            req = next(r for r in self.active if r.request_id == rid)
            self.active.remove(req)
            self.manager.release(rid)
            self.finished[rid] = req
        self.step_count += 1
        return StepStats(self.step_count, len(work), sum(counts[: len(prefill)]), sum(counts[len(prefill):]),
                         proposed, accepted, self.pages_in_use, finished)

    def _emit(self, req: Request, new_tokens: list[int]) -> None:
        for t in new_tokens:
            req.generated.append(t)
            if len(req.generated) >= req.max_new_tokens or t == self.eos_token_id:
                req.finish_step = self.step_count
                return

    def forward(self, tokens: Tensor, batch: AttentionBatch, rows: Sequence[int]) -> Tensor:
        """Logits `[len(rows), vocab]` of the given rows of a ragged step (decoder layers called one by one)."""
        inner = self.model.model
        x = inner.embed_tokens(tokens)
        for layer, attn in zip(inner.layers, self.attn):
            h = attn(layer.input_layernorm(x), batch)
            x = x + h
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        idx = torch.tensor(list(rows), dtype=torch.long, device=x.device)
        return self.model.lm_head(inner.norm(x[idx])).float()

    def run(self, max_steps: int | None = None) -> dict[Hashable, list[int]]:
        """Step until every request is finished (or max_steps); return generated tokens by request id."""
        steps = 0
        while self.has_unfinished and (max_steps is None or steps < max_steps):
            if self.step() is None:
                break
            steps += 1
        return {rid: req.generated for rid, req in self.finished.items()}

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """Serve a list of prompts together; their generated tokens in order."""
        ids = [self.add_request(p, max_new_tokens) for p in prompts]
        self.run()
        return [self.finished[i].generated for i in ids]
