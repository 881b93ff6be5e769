"""MLAttention and Engine against Hugging Face transformers' DeepSeek-V3 (CPU, float32, tiny random configs).

The layer is checked row by row against `DeepseekV3Attention` over a paged, NaN-poisoned cache through
prefill (chunked, with a shared prefix), mixed steps and decode steps of one and two query tokens; the
engine's greedy tokens are checked against `model.generate` on a left-padded batch.
"""

from __future__ import annotations

import math

import pytest
import torch

import pagedmla as pm
from pagedmla.model import AttentionBatch, Engine, MLAttention, resolve_backends, rope_freqs_cis
from pagedmla.model.engine import prompt_lookup_draft
from pagedmla.model.rope import freqs_cis_from_cos_sin, softmax_scale
from pagedmla.ops import _dispatch
from pagedmla.testing import assert_close

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
        "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 500.0}


@pytest.fixture(scope="module")
def hf():
    return pytest.importorskip("transformers")


def _randomize(module: torch.nn.Module, seed: int, gain: float = 2.0) -> None:
    """Weights ~ N(0, gain^2 / fan_in) (sharp attention, O(1) activations); norm weights ~ 1 + N(0, 0.1^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(noise * gain / math.sqrt(p.shape[-1]) if p.dim() == 2 else 1 + 0.1 * noise)


def _attention_config(hf, *, num_heads, q_lora_rank, rope, interleave, bias=False, v_head_dim=16):
    config = hf.DeepseekV3Config(
        vocab_size=64, hidden_size=48, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        kv_lora_rank=32, q_lora_rank=q_lora_rank, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=v_head_dim,
        max_position_embeddings=128, rope_parameters=dict(rope), rope_interleave=interleave, attention_bias=bias)
    config._attn_implementation = "eager"
    return config


def _hf_rotary(config):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3RotaryEmbedding,
    )

    return DeepseekV3RotaryEmbedding(config)


def _hf_attention_rows(module, rotary, x: torch.Tensor) -> torch.Tensor:
    """HF's causal attention output `[N, hidden]` for one whole sequence `x [N, hidden]`."""
    n = x.shape[0]
    cos, sin = rotary(x[None], torch.arange(n)[None])
    mask = torch.full((n, n), -math.inf).triu(1)[None, None]
    with torch.no_grad():
        out, _ = module(x[None], (cos, sin), mask)
    return out[0]


LAYER_CASES = [
    pytest.param({"num_heads": 3, "q_lora_rank": 24, "rope": YARN, "interleave": True}, 4,
                 id="H3-qlora-yarn-interleaved-ps4"),
    pytest.param({"num_heads": 5, "q_lora_rank": None, "rope": YARN, "interleave": False}, 16,
                 id="H5-noqlora-yarn-half-ps16"),
    pytest.param({"num_heads": 1, "q_lora_rank": 24, "rope": DEFAULT_ROPE, "interleave": True, "bias": True}, 1,
                 id="H1-qlora-default-bias-ps1"),
    pytest.param({"num_heads": 4, "q_lora_rank": None, "rope": DEFAULT_ROPE, "interleave": True, "v_head_dim": 8}, 5,
                 id="H4-noqlora-default-v8-ps5"),
]

# (prefill (request, tokens), decode (request, tokens)) per step; c shares a's first 6 rows (its pages), and
# its 12-token prompt is prefilled over two steps while a and b decode one or two tokens at a time.
LAYER_STEPS = [
    ([("a", 9), ("b", 1)], []),
    ([("c", None)], [("a", 2), ("b", 1)]),
    ([("c", 5)], [("a", 1), ("b", 2)]),
    ([], [("a", 2), ("b", 1), ("c", 2)]),
    ([], [("a", 1), ("b", 2), ("c", 1)]),
]


def _run_layer_steps(layer: MLAttention, hidden: dict, page_size: int, *, backend="reference"):
    """Run LAYER_STEPS through a paged layer; return {request: [(first position, output rows)]}."""
    params = pm.KVCacheParams(1, layer.cache_head_size, True, page_size, 2, torch.float32)
    manager = pm.PagedKVCacheManager(params, 96)
    # NaN in every slot no token was written to: a stray read shows up in the output.
    manager.blocks.fill_(float("nan"))
    got = {r: [] for r in hidden}
    for step, (prefill, decode) in enumerate(LAYER_STEPS):
        if step == 0:
            manager.claim("a")
            manager.claim("b")
            # A request holding pages between a's and c's scrambles the block order.
            manager.claim("pad")
            manager.reserve("pad", 3 * page_size)
        if step == 1:
            manager.release("pad")
            shared = manager.claim("c", share_prefix_from="a", num_shared_tokens=6)
            assert shared == 6 // page_size * page_size
        work = [(r, n if n is not None else 7 - manager.length(r)) for r, n in prefill + decode]
        ids, counts = [r for r, _ in work], [n for _, n in work]
        kv = manager.step(ids, counts)
        batch = AttentionBatch.build(kv, counts, num_prefill=len(prefill), num_heads=layer.num_heads,
                                     backend=backend)
        x = torch.cat([hidden[r][manager.length(r): manager.length(r) + n] for r, n in work])
        with torch.no_grad():
            y = layer(x, batch)
        assert not torch.isnan(y).any()
        row = 0
        for r, n in work:
            got[r].append((manager.length(r), y[row: row + n]))
            row += n
        manager.commit(ids, counts)
    return got


def _layer_inputs(hidden_size: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(15, hidden_size, generator=gen)
    c = torch.cat([a[:6], torch.randn(9, hidden_size, generator=gen)])
    return {"a": a, "b": torch.randn(7, hidden_size, generator=gen), "c": c}


@pytest.mark.parametrize("spec, page_size", LAYER_CASES)
def test_layer_matches_hf_attention(hf, spec, page_size):
    config = _attention_config(hf, **spec)
    module = hf.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(config, 0).eval()
    _randomize(module, seed=page_size)
    rotary = _hf_rotary(config)
    layer = MLAttention.from_hf(module, layer_idx=1, backend="reference", prefill_buffer_size=8)
    hidden = _layer_inputs(config.hidden_size, seed=7)
    got = _run_layer_steps(layer, hidden, page_size)
    for r, parts in got.items():
        want = _hf_attention_rows(module, rotary, hidden[r])
        for start, y in parts:
            assert_close(y, want[start: start + y.shape[0]], atol=1e-4, rtol=1e-4, name=f"{r}@{start}")


def test_layer_triton_where_available_matches_hf(hf):
    """The layer with every op that has a Triton kernel on it, the rest on the reference. CPU tensors: the
    Triton interpreter (conftest sets TRITON_INTERPRET=1 without a GPU), so float32 results stay exact."""
    config = _attention_config(hf, num_heads=3, q_lora_rank=24, rope=YARN, interleave=True)
    module = hf.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(config, 0).eval()
    _randomize(module, seed=3)
    backends = resolve_backends("triton", "cpu", torch.float32)
    if _dispatch.interpreter_enabled() and _dispatch.TRITON_LAUNCHERS:
        assert "triton" in backends.values()
    layer = MLAttention.from_hf(module, layer_idx=0, backend=backends, prefill_buffer_size=8)
    hidden = _layer_inputs(config.hidden_size, seed=11)
    got = _run_layer_steps(layer, hidden, 4, backend=backends)
    rotary = _hf_rotary(config)
    for r, parts in got.items():
        want = _hf_attention_rows(module, rotary, hidden[r])
        for start, y in parts:
            assert_close(y, want[start: start + y.shape[0]], atol=1e-4, rtol=1e-4, name=f"{r}@{start}")


@pytest.mark.parametrize("rope, interleave", [
    pytest.param(YARN, True, id="yarn-interleaved"), pytest.param(YARN, False, id="yarn-half"),
    pytest.param(DEFAULT_ROPE, True, id="default")])
def test_rope_table_and_scale_match_hf(hf, rope, interleave):
    config = _attention_config(hf, num_heads=3, q_lora_rank=None, rope=rope, interleave=interleave)
    module = hf.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(config, 0)
    cos, sin = _hf_rotary(config)(torch.zeros(1), torch.arange(128)[None])
    layer = MLAttention.from_hf(module)
    assert_close(layer.freqs_cis, freqs_cis_from_cos_sin(cos[0], sin[0]), atol=1e-6, name="freqs_cis")
    assert layer.softmax_scale == pytest.approx(module.scaling, rel=1e-12)
    assert softmax_scale(32, rope) == pytest.approx(module.scaling, rel=1e-12)
    assert layer.rope_interleaved is interleave


def test_reference_forward_matches_hf(hf):
    """The unpaged oracle of the layer-only demo is itself HF's attention."""
    config = _attention_config(hf, num_heads=3, q_lora_rank=24, rope=YARN, interleave=False, bias=True)
    module = hf.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention(config, 0).eval()
    _randomize(module, seed=5)
    x = torch.randn(13, config.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        mine = MLAttention.from_hf(module).reference_forward(x)
    assert_close(mine, _hf_attention_rows(module, _hf_rotary(config), x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("page_size", [pytest.param(1, id="ps1"), pytest.param(4, id="ps4")])
def test_standalone_layer_matches_unpaged_attention(page_size):
    """No transformers needed: a layer built from sizes against its own plain-attention oracle."""
    layer = MLAttention(48, 3, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=8,
                        q_lora_rank=24, freqs_cis=rope_freqs_cis(16, 64, 10000.0, YARN),
                        softmax_scale=softmax_scale(32, YARN), rope_interleaved=True, layer_idx=1,
                        backend="reference", prefill_buffer_size=8)
    _randomize(layer, seed=9)
    hidden = _layer_inputs(48, seed=4)
    got = _run_layer_steps(layer, hidden, page_size)
    with torch.no_grad():
        for r, parts in got.items():
            want = layer.reference_forward(hidden[r])
            for start, y in parts:
                assert_close(y, want[start: start + y.shape[0]], atol=1e-4, rtol=1e-4, name=f"{r}@{start}")


def test_attention_batch_rejects_bad_counts():
    params = pm.KVCacheParams(1, 48, True, 4, 1, torch.float32)
    manager = pm.PagedKVCacheManager(params, 8)
    manager.claim("a")
    kv = manager.step(["a"], [3])
    with pytest.raises(ValueError, match="num_new_tokens"):
        AttentionBatch.build(kv, [3, 1], num_prefill=1, num_heads=2)
    with pytest.raises(ValueError, match="num_new_tokens"):
        AttentionBatch.build(kv, [0], num_prefill=1, num_heads=2)
    with pytest.raises(ValueError, match="num_prefill"):
        AttentionBatch.build(kv, [3], num_prefill=2, num_heads=2)
    with pytest.raises(ValueError, match="backend"):
        resolve_backends("cuda", "cpu", torch.float32)
    assert set(resolve_backends("reference", "cpu", torch.float32).values()) == {"reference"}


def test_prompt_lookup_draft():
    assert prompt_lookup_draft([5, 6, 7, 5], 2) == [6, 7]
    assert prompt_lookup_draft([5, 6, 5], 3) == [6, 5, 5]
    assert prompt_lookup_draft([1, 2, 3], 2) == [3, 3]
    assert prompt_lookup_draft([1, 2], 0) == []


# ---- Engine against model.generate -------------------------------------------------------------------------

def _tiny_model(hf, **overrides):
    from pagedmla.model.demo import tiny_config, tiny_model

    return tiny_model(tiny_config(**overrides), seed=0)


def _hf_greedy(model, prompts, max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy generate on one left-padded batch."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                         do_sample=False, pad_token_id=0)
    return out[:, width:].tolist()


def _prompts(vocab: int, lengths, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


ENGINE_MODELS = [
    pytest.param({}, id="H3-qlora-yarn-interleaved"),
    pytest.param({"num_attention_heads": 5, "num_key_value_heads": 5, "q_lora_rank": None, "rope_interleave": False,
                  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, id="H5-noqlora-default-half"),
]


@pytest.mark.parametrize("overrides", ENGINE_MODELS)
def test_engine_batch_matches_generate(hf, overrides):
    model = _tiny_model(hf, **overrides)
    prompts = _prompts(model.config.vocab_size, [1, 5, 17, 33])
    engine = Engine(model, page_size=16, num_blocks=32, backend="reference")
    got = engine.generate(prompts, 8)
    assert got == _hf_greedy(model, prompts, 8)
    assert engine.step_count == 8
    assert engine.manager.num_free_blocks == engine.manager.num_blocks


def test_engine_chunked_prefill_and_continuous_batching(hf):
    model = _tiny_model(hf)
    prompts = _prompts(model.config.vocab_size, [33, 4, 12, 2, 9], seed=1)
    engine = Engine(model, page_size=4, num_blocks=64, max_num_tokens=10, prefill_chunk_size=7,
                    backend="reference", prefill_buffer_size=16)
    ids = [engine.add_request(p, 7) for p in prompts[:3]]
    mixed_steps = 0
    while engine.has_unfinished:
        if engine.step_count == 3:
            ids.append(engine.add_request(prompts[3], 7))
        if engine.step_count == 6:
            ids.append(engine.add_request(prompts[4], 7))
        stats = engine.step()
        mixed_steps += stats.num_prefill_tokens > 0 and stats.num_decode_tokens > 0
    got = [engine.finished[i].generated for i in ids]
    assert got == _hf_greedy(model, prompts, 7)
    # 33 prompt tokens at most 7 per step: at least 5 steps of prefill, decoding others meanwhile.
    assert engine.finished[ids[0]].num_prefill_chunks >= 5
    assert mixed_steps >= 3
    assert engine.manager.num_free_blocks == engine.manager.num_blocks


def test_engine_shared_prefixes(hf):
    model = _tiny_model(hf)
    vocab = model.config.vocab_size
    system, other = _prompts(vocab, [14, 20], seed=2)
    tails = _prompts(vocab, [3, 6, 1], seed=3)
    prompts = [system + tails[0], other, system + tails[1], system[:9] + tails[2], other + tails[0]]
    engine = Engine(model, page_size=4, num_blocks=64, max_num_tokens=64, backend="reference")
    ids = [engine.add_request(prompts[0], 6), engine.add_request(prompts[1], 6)]
    engine.step()
    ids += [engine.add_request(p, 6) for p in prompts[2:]]
    engine.run()
    reqs = [engine.finished[i] for i in ids]
    assert [r.generated for r in reqs] == _hf_greedy(model, prompts, 6)
    # 14 common tokens -> 3 full pages; 9 -> 2; all of `other` (20 tokens) -> 5.
    assert [r.num_shared for r in reqs] == [0, 0, 12, 8, 20]
    assert engine.pages_shared == 10
    assert engine.manager.num_free_blocks == engine.manager.num_blocks


def test_engine_verification_matches_generate(hf):
    """Decode steps verifying 2 drafted tokens (3 query tokens per sequence): right, half-right and wrong
    drafts all give greedy's tokens."""
    model = _tiny_model(hf)
    prompts = _prompts(model.config.vocab_size, [6, 11, 3], seed=4)
    want = _hf_greedy(model, prompts, 10)
    vocab = model.config.vocab_size

    def draft(tokens, k):
        i = next(i for i, p in enumerate(prompts) if tokens[: len(p)] == p and len(p) <= len(tokens))
        done = len(tokens) - len(prompts[i])
        drafts = (want[i][done: done + k] + [0] * k)[:k]
        if len(tokens) % 3 == 0:
            drafts[-1] = (drafts[-1] + 1) % vocab
        if len(tokens) % 4 == 0:
            drafts[0] = (drafts[0] + 1) % vocab
        return drafts

    engine = Engine(model, page_size=4, num_blocks=32, num_speculative_tokens=2, draft_fn=draft,
                    backend="reference")
    assert engine.generate(prompts, 10) == want
    reqs = list(engine.finished.values())
    proposed = sum(r.drafts_proposed for r in reqs)
    accepted = sum(r.drafts_accepted for r in reqs)
    assert 0 < accepted < proposed
    assert engine.step_count < 10


def test_engine_rejects_bad_requests(hf):
    model = _tiny_model(hf)
    engine = Engine(model, page_size=4, num_blocks=8, backend="reference")
    with pytest.raises(ValueError, match="prompt"):
        engine.add_request([], 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.add_request([1, 2], 0)
    with pytest.raises(ValueError, match="positions"):
        engine.add_request([1] * 250, 10)
    engine.add_request([1, 2], 2, request_id="x")
    with pytest.raises(ValueError, match="request_id"):
        engine.add_request([3], 2, request_id="x")
    with pytest.raises(ValueError, match="max_num_tokens"):
        Engine(model, max_num_tokens=2, num_speculative_tokens=2)
