"""`pagedmla demo`: serve a tiny random DeepSeek-V3 end to end on the paged MLA ops and check every token.

The full demo (needs transformers) builds a tiny random `DeepseekV3ForCausalLM` (odd head count, q LoRA,
YaRN rope), serves a mixed workload through `Engine` (requests joining mid-way, a long prompt prefilled in
chunks over several steps, prompts sharing a prefix's pages, decode steps verifying a drafted token, so two
query tokens per sequence) and compares every request's tokens with transformers' own `generate`.
`--layer-only` (also the fallback without transformers) runs one MLA layer: cache write, RMS norm, rope,
prefill with a shared prefix, decode with two query tokens per sequence, checked against plain unpaged
attention. The exit status is non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time

__all__ = ["main", "tiny_config", "tiny_model"]

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def tiny_config(**overrides):
    """A tiny DeepSeek-V3 config: 2 layers (dense MLP then MoE), 3 heads, kv_lora_rank 32 + rope 16, YaRN."""
    from transformers import DeepseekV3Config

    kw = {
        "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 3, "num_key_value_heads": 3, "n_shared_experts": 1,
        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1,
        "kv_lora_rank": 32, "q_lora_rank": 24, "qk_rope_head_dim": 16, "qk_nope_head_dim": 16, "v_head_dim": 16,
        "max_position_embeddings": 256,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 64, "mscale": 0.707, "mscale_all_dim": 1.0,
                            "beta_fast": 32, "beta_slow": 1},
        "initializer_range": 0.2, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
    }
    kw.update(overrides)
    return DeepseekV3Config(**kw)


def tiny_model(config, *, seed: int = 0, device="cpu", dtype=None):
    """A random `DeepseekV3ForCausalLM` in eval mode (weights ~ N(0, initializer_range))."""
    import torch
    from transformers import DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).eval()
    if dtype is not None:
        model = model.to(dtype)
    return model.to(device)


def _parse(argv):
    p = argparse.ArgumentParser(prog="pagedmla demo", description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("auto", "reference", "triton"), default="auto",
                   help="ops backend: auto (Triton on CUDA where kernels exist, else reference), reference, or "
                        "triton (kernels where they exist, the Triton interpreter on CPU; reference elsewhere)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", default=None, choices=sorted(_DTYPES),
                   help="model and cache dtype (default: bfloat16 on CUDA, float32 on CPU)")
    p.add_argument("--layer-only", action="store_true", help="one MLA layer end to end, no transformers needed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def _bar(done: int, total: int, step: int, width: int = 28) -> str:
    filled = width * done // max(total, 1)
    return f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} tokens, step {step}"


def _fmt_backends(mapping: dict) -> str:
    groups: dict[str, list[str]] = {}
    for op, b in mapping.items():
        groups.setdefault(b, []).append(op)
    return "; ".join(f"{b}: {', '.join(ops)}" for b, ops in sorted(groups.items()))


def _workload(vocab: int, seed: int):
    """(arrival step, prompt, max_new_tokens) of a mixed workload with shared prefixes and a long prompt."""
    import torch

    g = torch.Generator().manual_seed(1000 + seed)

    def rand(n):
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    system = rand(20)
    long_prompt = rand(70)
    return [
        (0, system + rand(5), 10),
        (0, rand(6), 12),
        (0, long_prompt, 8),
        (1, rand(3), 9),
        (2, system + rand(9), 10),
        (4, long_prompt[:50] + rand(6), 8),
        (6, rand(11), 7),
    ]


def _run_model_demo(args, torch, device, dtype, backends) -> int:
    from .engine import Engine

    config = tiny_config()
    model = tiny_model(config, seed=args.seed, device=device, dtype=dtype)
    work = _workload(config.vocab_size, args.seed)
    total = sum(n for _, _, n in work)
    engine = Engine(model, page_size=8, num_blocks=96, max_num_tokens=24, prefill_chunk_size=16,
                    num_speculative_tokens=1, backend=backends, prefill_buffer_size=256)
    print(f"pagedmla demo: tiny DeepSeek-V3 ({config.num_hidden_layers} layers, {config.num_attention_heads} heads, "
          f"kv_lora_rank {config.kv_lora_rank} + rope {config.qk_rope_head_dim}, YaRN) on {device}, {dtype}")
    print(f"  ops: {_fmt_backends(backends)}")
    pending = sorted(enumerate(work), key=lambda x: x[1][0])
    ids: dict[int, int] = {}
    verify_steps = max_batch = 0
    start = time.perf_counter()
    while pending or engine.has_unfinished:
        while pending and pending[0][1][0] <= engine.step_count:
            i, (_, prompt, n) = pending.pop(0)
            ids[i] = engine.add_request(prompt, n)
        stats = engine.step()
        if stats is None:
            break
        max_batch = max(max_batch, stats.num_sequences)
        verify_steps += stats.drafts_proposed > 0
        if not args.quiet:
            done = sum(len(r.generated) for r in engine.active) + sum(len(r.generated) for r in
                                                                        engine.finished.values())
            print(_bar(done, total, engine.step_count), end="", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if not args.quiet:
        print()

    generated = {i: engine.finished[rid].generated for i, rid in ids.items()}
    expected = {}
    with torch.no_grad():
        for i, (_, prompt, n) in enumerate(work):
            out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False,
                                 attention_mask=torch.ones(1, len(prompt), dtype=torch.long, device=device))
            expected[i] = out[0, len(prompt):].tolist()
    reqs = list(engine.finished.values())
    gen_tokens = sum(len(r.generated) for r in reqs)
    longest = max(reqs, key=lambda r: len(r.prompt))
    print(f"  requests {len(reqs)} ({sum(r.arrival_step > 0 for r in reqs)} joined mid-way), prompt tokens "
          f"{sum(len(r.prompt) for r in reqs)} ({sum(r.num_shared for r in reqs)} read from shared pages), "
          f"generated tokens {gen_tokens}")
    print(f"  longest prompt {len(longest.prompt)} tokens, prefilled in {longest.num_prefill_chunks} chunks")
    print(f"  steps {engine.step_count} (max {max_batch} sequences in a step, {verify_steps} steps verifying drafts), "
          f"drafts accepted {sum(r.drafts_accepted for r in reqs)}/{sum(r.drafts_proposed for r in reqs)}")
    print(f"  pages: peak {engine.peak_pages_in_use}/{engine.manager.num_blocks} of "
          f"{engine.manager.params.page_size} tokens, {engine.pages_shared} shared by prefix")
    print(f"  time {elapsed:.2f} s, {gen_tokens / max(elapsed, 1e-9):.1f} generated tokens/s")

    exact = dtype == torch.float32 and (device.type == "cpu" or set(backends.values()) == {"reference"})
    matched = first_ok = 0
    for i, b in expected.items():
        a = generated[i]
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        matched += k
        first_ok += bool(a) and bool(b) and a[0] == b[0]
    rate = matched / max(1, sum(len(b) for b in expected.values()))
    if exact:
        bad = [i for i in expected if generated[i] != expected[i]]
        if bad:
            for i in bad:
                print(f"  MISMATCH request {i}: engine {generated[i]} vs transformers {expected[i]}")
            print(f"check FAILED: {len(bad)}/{len(expected)} requests differ from transformers' generate")
            return 1
        print(f"check OK: all {len(expected)} requests match transformers' generate token for token")
        return 0
    print(f"  agreement with transformers' generate ({dtype}, not expected to be bit-exact): "
          f"{100 * rate:.1f}% of tokens before the first divergence, first token {first_ok}/{len(expected)}")
    if first_ok * 2 < len(expected):
        print("check FAILED: fewer than half of the requests agree on their first token")
        return 1
    print("check OK (agreement reported above)")
    return 0


def _run_layer_demo(args, torch, device, dtype, backends) -> int:
    import pagedmla as pm

    from .attention import AttentionBatch, MLAttention
    from .rope import rope_freqs_cis, softmax_scale

    torch.manual_seed(args.seed)
    heads, hidden, rank, rope, nope, v_dim = 3, 64, 32, 16, 16, 16
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 0.707,
            "mscale_all_dim": 1.0}
    layer = MLAttention(hidden, heads, kv_lora_rank=rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
                        v_head_dim=v_dim, q_lora_rank=24, freqs_cis=rope_freqs_cis(rope, 128, 10000.0, yarn),
                        softmax_scale=softmax_scale(nope + rope, yarn), backend=backends, prefill_buffer_size=32)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 2 / math.sqrt(p.shape[-1]) if p.dim() == 2 else 1 + 0.1 * torch.randn_like(p))
    layer = layer.to(device=device, dtype=dtype).eval()
    # The oracle: the same (possibly rounded) weights, float32 math, no paging.
    oracle = copy.deepcopy(layer).float()
    page = 4
    params = pm.KVCacheParams(1, layer.cache_head_size, True, page, 1, dtype)
    manager = pm.PagedKVCacheManager(params, 32, device=device)
    # Unused slots hold NaN: a read past a sequence's tokens would show in the output.
    manager.blocks.fill_(float("nan"))
    prefix = torch.randn(10, hidden)
    seqs = {"a": torch.cat([prefix, torch.randn(3 + 4, hidden)]), "b": torch.cat([prefix, torch.randn(6 + 4, hidden)]),
            "c": torch.randn(7 + 4, hidden)}
    prompts = {"a": 13, "b": 16, "c": 7}
    seqs = {k: v.to(device=device, dtype=dtype) for k, v in seqs.items()}
    cached = dict.fromkeys(seqs, 0)
    got: dict[str, list] = {k: [] for k in seqs}

    def run(prefill: list[str], decode: list[str], n_decode: int):
        ids = prefill + decode
        counts = [prompts[r] - cached[r] for r in prefill] + [n_decode] * len(decode)
        kv = manager.step(ids, counts)
        batch = AttentionBatch.build(kv, counts, num_prefill=len(prefill), num_heads=heads, dtype=dtype,
                                     backend=backends)
        x = torch.cat([seqs[r][cached[r]: cached[r] + n] for r, n in zip(ids, counts)])
        with torch.no_grad():
            y = layer(x, batch)
        row = 0
        for r, n in zip(ids, counts):
            got[r].append((cached[r], y[row: row + n]))
            cached[r] += n
            row += n
        manager.commit(ids, counts)

    for r in ("a", "c"):
        manager.claim(r)
    run(["a", "c"], [], 0)
    shared = manager.claim("b", share_prefix_from="a", num_shared_tokens=10)
    cached["b"] = shared
    # A mixed step: b's prompt (after the shared pages) with two decode tokens of a and c.
    run(["b"], ["a", "c"], 2)
    run([], ["a", "b", "c"], 2)
    worst = scale = 0.0
    with torch.no_grad():
        for r, parts in got.items():
            want = oracle.reference_forward(seqs[r].float())
            scale = max(scale, float(want.abs().max()))
            for start, y in parts:
                worst = max(worst, float((y.float() - want[start: start + y.shape[0]]).abs().max()))
    # float32: rounding only; 16-bit: activations and cache rows carry ~3 significant digits.
    atol = 1e-4 if dtype == torch.float32 else 3e-2 * scale
    print(f"pagedmla demo --layer-only: one MLA layer ({heads} heads, kv_lora_rank {rank} + rope {rope}, YaRN) on "
          f"{device}, {dtype}")
    print(f"  ops: {_fmt_backends(backends)}")
    print(f"  3 sequences, page {page}: prefill (b shares {shared} prefix tokens of a), then a mixed step and a "
          f"decode step with 2 query tokens per sequence; pages in use {manager.num_blocks - manager.num_free_blocks}")
    ok = math.isfinite(worst) and worst <= atol
    print(f"  max |paged - unpaged attention| = {worst:.2e} (tolerance {atol:g})")
    print("check OK" if ok else "check FAILED")
    return 0 if ok else 1


def main(argv=None) -> int:
    """Run the demo; returns the exit status (0 when every check passes)."""
    args = _parse(argv)
    import torch

    has_cuda = torch.cuda.is_available()
    if args.backend == "triton" and not has_cuda:
        # Triton reads this when a kernel is first jitted: set it before any kernel module is imported.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    device = torch.device(args.device or ("cuda" if has_cuda else "cpu"))
    if device.type == "cuda" and not has_cuda:
        print("pagedmla demo: --device cuda asked but no CUDA device is available", file=sys.stderr)
        return 2
    dtype_name = _DTYPES[args.dtype] if args.dtype else ("bfloat16" if device.type == "cuda" else "float32")
    dtype = getattr(torch, dtype_name)

    from .attention import resolve_backends

    backends = resolve_backends(args.backend, device, dtype)
    layer_only = args.layer_only
    if not layer_only:
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("pagedmla demo: transformers is not installed (pip install 'pagedmla[model]'); "
                  "running the single-layer demo instead")
            layer_only = True
    run = _run_layer_demo if layer_only else _run_model_demo
    return run(args, torch, device, dtype, backends)


if __name__ == "__main__":
    sys.exit(main())
