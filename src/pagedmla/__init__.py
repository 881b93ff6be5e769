"""pagedmla: Multi-head Latent Attention kernels over a paged, ragged KV cache (PyTorch + Triton).

>>> import pagedmla as pm
>>> sorted(pm.MASKS)[:2]
['causal', 'chunked']
"""

from .cache import (
    KVCacheParams,
    OutOfPagesError,
    PagedKVCacheCollection,
    PagedKVCacheManager,
    quantize_kv_cache,
    row_offsets,
)
from .masks import MASK_CODES as MASKS
from .ops import (
    DecodePlan,
    fused_qk_rope_ragged,
    k_matmul_ragged_paged,
    kv_matmul_ragged_paged,
    mla_decode_kv_cache_ragged,
    mla_decode_plan,
    mla_decompress_k_cache_ragged_paged,
    mla_prefill,
    mla_prefill_kv_cache_ragged,
    mla_prefill_plan,
    rms_norm_key_cache,
)

__version__ = "0.1.0"

__all__ = [
    "MASKS",
    "DecodePlan",
    "KVCacheParams",
    "OutOfPagesError",
    "PagedKVCacheCollection",
    "PagedKVCacheManager",
    "fused_qk_rope_ragged",
    "k_matmul_ragged_paged",
    "kv_matmul_ragged_paged",
    "mla_decode_kv_cache_ragged",
    "mla_decode_plan",
    "mla_decompress_k_cache_ragged_paged",
    "mla_prefill",
    "mla_prefill_kv_cache_ragged",
    "mla_prefill_plan",
    "quantize_kv_cache",
    "rms_norm_key_cache",
    "row_offsets",
]
