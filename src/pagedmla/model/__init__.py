"""A DeepSeek-style MLA layer and a small paged serving engine built on pagedmla's ops.

`MLAttention` runs DeepSeek-V2/V3 attention on the paged latent cache (prefill path for prompts, absorbed
decode for generated tokens); `Engine` serves a transformers `DeepseekV3ForCausalLM` with it (continuous
batching, chunked prefill, shared prompt prefixes, greedy decoding with optional draft verification).
Importing this package does not import transformers.
"""

from .attention import AttentionBatch, MLAttention, RMSNorm, resolve_backends
from .engine import Engine, Request, StepStats
from .rope import rope_freqs_cis, softmax_scale

__all__ = [
    "AttentionBatch",
    "Engine",
    "MLAttention",
    "RMSNorm",
    "Request",
    "StepStats",
    "resolve_backends",
    "rope_freqs_cis",
    "softmax_scale",
]
