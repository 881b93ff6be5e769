"""Host code of every operation: validate, allocate, pick the backend, call the registered custom op."""

from .cache_write import fused_qk_rope_ragged, k_matmul_ragged_paged, kv_matmul_ragged_paged, rms_norm_key_cache
from .decode import DecodePlan, mla_decode_kv_cache_ragged, mla_decode_plan
from .prefill import mla_decompress_k_cache_ragged_paged, mla_prefill, mla_prefill_kv_cache_ragged, mla_prefill_plan

__all__ = [
    "DecodePlan",
    "fused_qk_rope_ragged",
    "k_matmul_ragged_paged",
    "kv_matmul_ragged_paged",
    "mla_decode_kv_cache_ragged",
    "mla_decode_plan",
    "mla_decompress_k_cache_ragged_paged",
    "mla_prefill",
    "mla_prefill_kv_cache_ragged",
    "mla_prefill_plan",
    "rms_norm_key_cache",
]
