"""Host launchers of the cache-write kernels (registered in `ops/cache_write.py`).

Each takes exactly the arguments the op passes to the reference and mutates the cache (and q_out). Only the
projection GEMM allocates, and only with split tiles: float32 partial tiles and zeroed arrival counters. Inputs
were validated by the public functions.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from ..configs.cache_write import MatmulToCacheConfig, RowConfig, matmul_to_cache_heuristic, row_heuristic
from ..kernels.cache_write import (
    _matmul_to_cache_kernel,
    _matmul_to_cache_stream_kernel,
    _rms_norm_cache_kernel,
    _rope_kernel,
)
from ._dispatch import interpreter_enabled


def search_steps(batch: int) -> int:
    """Bisection steps that find any row's sequence among `batch` (kernels.common.ragged_search), rounded up
    to a multiple of 4 so that batch sizes share a handful of compiled variants."""
    return -(-(batch.bit_length() + 1) // 4) * 4


def _tma_ready(t: torch.Tensor) -> bool:
    """A 2-D tensor TMA can describe: unit last stride, 16-byte aligned base and row stride."""
    return (t.stride(1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0
            and t.shape[0] > 0)


@functools.cache
def _device_limits(device_index: int) -> tuple[int, int]:
    """(SMs, shared memory one program may opt in to, in bytes) of a CUDA device."""
    props = torch.cuda.get_device_properties(device_index)
    return props.multi_processor_count, getattr(props, "shared_memory_per_block_optin",
                                                232448 if props.major >= 9 else 0)


def _matmul_to_cache(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table, layer_idx,
                     config: MatmulToCacheConfig | None):
    num_rows, in_features = hidden_state.shape
    out_features = weight.shape[0]
    batch = cache_lengths.shape[0]
    if num_rows == 0 or batch == 0:
        return
    interpret = interpreter_enabled()
    device = hidden_state.device
    num_sms, shared = _device_limits(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else (132, 0)
    cfg = config or matmul_to_cache_heuristic(num_rows, out_features, in_features, num_sms=num_sms,
                                              shared_memory=shared, interpret=interpret)
    if cfg.stream_workers:
        _launch_stream(cfg, hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table, layer_idx,
                       interpret)
        return
    tiles_m = triton.cdiv(num_rows, cfg.block_m)
    rest = out_features % cfg.block_n
    tail_n = cfg.tail_block_n if rest and out_features > cfg.block_n else 0
    main_tiles = tiles_m * (out_features // cfg.block_n if tail_n else triton.cdiv(out_features, cfg.block_n))
    tail_tiles = tiles_m * triton.cdiv(rest, tail_n) if tail_n else 0
    split, tail_split = cfg.split_k, (cfg.tail_split_k if tail_n else 1)
    # the tail tile of each row tile in pieces run by that row's main programs (one piece each)
    tail_in_main = bool(cfg.tail_in_main and tail_n and split == 1 and rest <= tail_n)
    if tail_in_main:
        tail_split = out_features // cfg.block_n
    # float32 partial tiles and arrival counters of the split tiles (main, then tail); the counters start at zero
    # every call
    main_slots, tail_slots = (main_tiles if split > 1 else 0), (tail_tiles if tail_split > 1 else 0)
    if main_slots + tail_slots:
        partials = torch.empty(cfg.block_m * (main_slots * split * cfg.block_n + tail_slots * tail_split * tail_n),
                               dtype=torch.float32, device=device)
        counters = torch.zeros(main_slots + tail_slots, dtype=torch.int32, device=device)
    else:  # never touched
        partials = torch.empty(1, dtype=torch.float32, device=device)
        counters = torch.empty(1, dtype=torch.int32, device=device)
    x, w, w_tail, use_tma = _operands(cfg, hidden_state, weight, tail_n)
    grid = (main_tiles * split + (0 if tail_in_main else tail_tiles * tail_split),)
    _matmul_to_cache_kernel[grid](
        x, w, w_tail, blocks, input_row_offsets, cache_lengths, lookup_table, partials, counters,
        num_rows, out_features, batch, layer_idx, blocks.shape[3],
        hidden_state.stride(0), weight.stride(0), lookup_table.stride(0),
        blocks.stride(0), blocks.stride(1), blocks.stride(2), blocks.stride(3), blocks.stride(4),
        K=in_features, NUM_HEADS=blocks.shape[4], HEAD_SIZE=blocks.shape[5], SEARCH_STEPS=search_steps(batch),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        SPLIT_K=split, TAIL_N=tail_n, TAIL_SPLIT_K=tail_split, TAIL_IN_MAIN=tail_in_main,
        USE_TMA=use_tma, IEEE=hidden_state.dtype == torch.float32, INTERPRET=interpret,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def _operands(cfg: MatmulToCacheConfig, hidden_state, weight, tail_n: int):
    """(x, w, w_tail, use_tma): tensor descriptors when the config asks for TMA and the layouts allow it."""
    if not (cfg.tma and _tma_ready(hidden_state) and _tma_ready(weight)):
        return hidden_state, weight, weight, False
    w = TensorDescriptor.from_tensor(weight, [cfg.block_n, cfg.block_k])
    return (TensorDescriptor.from_tensor(hidden_state, [cfg.block_m, cfg.block_k]), w,
            TensorDescriptor.from_tensor(weight, [tail_n, cfg.block_k]) if tail_n else w, True)


def _launch_stream(cfg: MatmulToCacheConfig, hidden_state, input_row_offsets, weight, blocks, cache_lengths,
                   lookup_table, layer_idx: int, interpret: bool):
    """The stream-K launch: groups of one program per `block_n + tail_block_n` columns, equal spans of the row
    tiles' K blocks per group (see the kernel)."""
    num_rows, in_features = hidden_state.shape
    out_features = weight.shape[0]
    bn2 = cfg.tail_block_n
    num_col_tiles = triton.cdiv(out_features, cfg.block_n + bn2)
    k_blocks = triton.cdiv(in_features, cfg.block_k)
    total = triton.cdiv(num_rows, cfg.block_m) * k_blocks
    per_group = triton.cdiv(total, max(1, cfg.stream_workers // num_col_tiles))
    groups = triton.cdiv(total, per_group)
    # the most groups one row tile can be shared by: a span of k_blocks units meets at most this many
    max_pieces = (k_blocks - 1) // per_group + 2
    device = hidden_state.device
    # spans of whole row tiles share none (no partials); else partials and arrival counters of the shared row
    # tiles, one slot per (first group, column tile)
    if groups > 1 and per_group % k_blocks:
        slots = groups * num_col_tiles
        partials = torch.empty(slots * max_pieces * cfg.block_m * (cfg.block_n + bn2), dtype=torch.float32,
                               device=device)
        counters = torch.zeros(slots, dtype=torch.int32, device=device)
    else:  # never touched
        partials = torch.empty(1, dtype=torch.float32, device=device)
        counters = torch.empty(1, dtype=torch.int32, device=device)
    x, w, w2, use_tma = _operands(cfg, hidden_state, weight, bn2)
    _matmul_to_cache_stream_kernel[(groups * num_col_tiles,)](
        x, w, w2, blocks, input_row_offsets, cache_lengths, lookup_table, partials, counters,
        num_rows, out_features, cache_lengths.shape[0], layer_idx, blocks.shape[3], num_col_tiles, per_group,
        max_pieces, hidden_state.stride(0), weight.stride(0), lookup_table.stride(0),
        blocks.stride(0), blocks.stride(1), blocks.stride(2), blocks.stride(3), blocks.stride(4),
        K=in_features, NUM_HEADS=blocks.shape[4], HEAD_SIZE=blocks.shape[5],
        SEARCH_STEPS=search_steps(cache_lengths.shape[0]), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BN2=bn2,
        BLOCK_K=cfg.block_k, USE_TMA=use_tma, IEEE=hidden_state.dtype == torch.float32, INTERPRET=interpret,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def k_matmul_ragged_paged(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table,
                          layer_idx: int, config: MatmulToCacheConfig | None = None) -> None:
    """MLA: `hidden_state @ weight.T` stored as the K row of each new token (the GEMM's epilogue scatters)."""
    _matmul_to_cache(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table, layer_idx,
                     config)


def kv_matmul_ragged_paged(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table,
                           layer_idx: int, config: MatmulToCacheConfig | None = None) -> None:
    """MHA: columns [0, Hkv*D) of `hidden_state @ weight.T` go to K, the rest to V (one kernel, one pass)."""
    _matmul_to_cache(hidden_state, input_row_offsets, weight, blocks, cache_lengths, lookup_table, layer_idx,
                     config)


def rms_norm_key_cache(blocks, cache_lengths, lookup_table, gamma, input_row_offsets, layer_idx: int, eps: float,
                       max_seq_length: int, config: RowConfig | None = None) -> None:
    """In place: RMS norm of columns [0, len(gamma)) of the new tokens' K rows; one program per (sequence, tile
    of its rows) on a 1-D grid (CUDA's y and z axes stop at 65535: a batch on y would fail to launch past that),
    no sync."""
    batch = cache_lengths.shape[0]
    if batch == 0 or max_seq_length == 0:
        return
    cfg = config or row_heuristic(interpret=interpreter_enabled())
    cols = gamma.shape[0]
    num_tiles = triton.cdiv(max_seq_length, cfg.block_rows)
    _rms_norm_cache_kernel[(batch * num_tiles,)](
        blocks, gamma, input_row_offsets, cache_lengths, lookup_table,
        layer_idx, blocks.shape[3], eps, num_tiles,
        lookup_table.stride(0), blocks.stride(0), blocks.stride(2), blocks.stride(3),
        COLS=cols, BLOCK_C=triton.next_power_of_2(cols), BLOCK_T=cfg.block_rows, num_warps=cfg.num_warps,
    )


def fused_qk_rope_ragged(q_rope, input_row_offsets, blocks, cache_lengths, lookup_table, freqs_cis,
                         layer_idx: int, interleaved: bool, q_out, config: RowConfig | None = None) -> None:
    """Rope q into q_out and, in place, the last R columns of the new tokens' K rows; one program per token."""
    num_rows, num_heads, rope_dim = q_rope.shape
    batch = cache_lengths.shape[0]
    if num_rows == 0 or batch == 0:
        return
    cfg = config or row_heuristic(interpret=interpreter_enabled())
    _rope_kernel[(num_rows,)](
        q_rope, q_out, freqs_cis, blocks, input_row_offsets, cache_lengths, lookup_table,
        batch, layer_idx, blocks.shape[3], blocks.shape[5] - rope_dim,
        q_rope.stride(0), q_rope.stride(1), q_rope.stride(2), q_out.stride(0), q_out.stride(1), q_out.stride(2),
        freqs_cis.stride(0), freqs_cis.stride(1), lookup_table.stride(0),
        blocks.stride(0), blocks.stride(2), blocks.stride(3),
        NUM_HEADS=num_heads, ROPE=rope_dim, SEARCH_STEPS=search_steps(batch),
        BLOCK_R=triton.next_power_of_2(rope_dim), BLOCK_H=min(triton.next_power_of_2(num_heads), 32),
        INTERLEAVED=interleaved, num_warps=cfg.num_warps,
    )
