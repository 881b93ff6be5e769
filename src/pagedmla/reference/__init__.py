"""Float32 PyTorch oracles for every operation (plain torch; importing this never imports Triton).

Each function takes the raw tensors of a `PagedKVCacheCollection` (blocks, cache_lengths, lookup_table,
scales) so the custom-op layer can call it directly; outputs are written into caller-given tensors.
"""

from .attention import merge_states
from .cache_write import fused_qk_rope_ragged, k_matmul_ragged_paged, kv_matmul_ragged_paged, rms_norm_key_cache
from .decode import mla_decode_kv_cache_ragged
from .paged import dequantize_rows, quantize_rows
from .prefill import mla_decompress_k_cache_ragged_paged, mla_prefill_kv_cache_ragged, mla_prefill_plan

__all__ = [
    "dequantize_rows",
    "fused_qk_rope_ragged",
    "k_matmul_ragged_paged",
    "kv_matmul_ragged_paged",
    "merge_states",
    "mla_decode_kv_cache_ragged",
    "mla_decompress_k_cache_ragged_paged",
    "mla_prefill_kv_cache_ragged",
    "mla_prefill_plan",
    "quantize_rows",
    "rms_norm_key_cache",
]
