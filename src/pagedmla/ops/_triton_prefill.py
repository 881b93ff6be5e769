"""Host launchers of the prefill kernels (registered in `ops/prefill.py`).

Each takes exactly the arguments the custom op passes to the reference. Inputs were validated by the public
functions; only the plan allocates (its outputs are the op's results).
"""

from __future__ import annotations

import math

import torch
import triton

from ..configs.prefill import DecompressConfig, PrefillConfig, decompress_heuristic, prefill_heuristic
from ..kernels.prefill import _gather_latent_kernel, _mla_prefill_kernel, _prefill_plan_kernel
from ._dispatch import gluon_kernels_available, interpreter_enabled, is_hopper
from ._triton_cache_write import search_steps

# Gluon (Triton's explicit-layout dialect) changes between Triton releases: the warp-specialized prefill is
# written and tested against Triton 3.6; with any other version the Triton kernel runs.
_WS_AVAILABLE = gluon_kernels_available()
if _WS_AVAILABLE:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor

    from ..kernels.prefill_ws import _prefill_ws_kernel


def mla_prefill_plan(input_row_offsets, cache_lengths, page_size: int, buffer_size: int, max_chunks: int):
    """The chunk plan computed on the device, without a host sync (same outputs as the reference).

    A batch that needs more than max_chunks chunks cannot raise inside the kernel: it writes the first
    max_chunks chunks exactly and rows past `max_chunks * buffer_size` belong to no chunk. The public
    `mla_prefill_plan` raises ValueError for such a batch before launching (outside tracing and graph capture).
    """
    batch = cache_lengths.shape[0]
    device = input_row_offsets.device
    bro = torch.empty((max_chunks, batch + 1), dtype=torch.int32, device=device)
    co = torch.empty((max_chunks, batch), dtype=torch.int32, device=device)
    lengths = torch.empty((max_chunks,), dtype=torch.int32, device=device)
    block_c = 16
    _prefill_plan_kernel[(triton.cdiv(max_chunks, block_c),)](
        input_row_offsets, cache_lengths, bro, co, lengths, batch, page_size, buffer_size, max_chunks,
        BLOCK_C=block_c, BLOCK_B=128, num_warps=4,
    )
    return bro, co, lengths


def _scales_args(blocks, scales, granularity: int):
    """(pointer, strides of block/layer/slot, granularity, scaled) for an optional FP8 scales tensor."""
    if scales is None:
        return blocks, (0, 0, 0), 1, False
    group = granularity or blocks.shape[5] // scales.shape[5]
    return scales, (scales.stride(0), scales.stride(2), scales.stride(3)), group, True


def _gather_rows(buffer_row_offsets, cache_offsets, lookup_table, blocks, scales, quant_granularity: int,
                 layer_idx: int, out, num_rows: int, cfg: DecompressConfig) -> None:
    """out[r] = the first `out.shape[1]` columns of `blocks` (a view, possibly offset along the row) at the cache
    position behind buffer row r < num_rows (`_gather_latent_kernel`; FP8 rows dequantize with `scales`)."""
    batch = cache_offsets.shape[0]
    rank = out.shape[1]
    scales_ptr, (s_b, s_l, s_s), group, scaled = _scales_args(blocks, scales, quant_granularity)
    _gather_latent_kernel[(triton.cdiv(num_rows, cfg.gather_rows),)](
        buffer_row_offsets, cache_offsets, lookup_table, blocks, scales_ptr, out,
        num_rows, batch, layer_idx, blocks.shape[3], lookup_table.shape[1], blocks.shape[0],
        lookup_table.stride(0), blocks.stride(0), blocks.stride(2), blocks.stride(3), s_b, s_l, s_s, out.stride(0),
        RANK=rank, BLOCK_RANK=triton.next_power_of_2(rank), BLOCK_R=cfg.gather_rows, GROUP=group, SCALED=scaled,
        SEARCH_STEPS=search_steps(batch), INTERPRET=interpreter_enabled(), num_warps=cfg.gather_warps,
    )


def mla_decompress_k_cache_ragged_paged(buffer_row_offsets, cache_offsets, buffer_length: int, weight, blocks,
                                        cache_lengths, lookup_table, scales, quant_granularity: int, layer_idx: int,
                                        k_latent_buffer, k_buffer, config: DecompressConfig | None = None) -> None:
    """Gather the chunk's latent rows into k_latent_buffer (Triton), then `k_buffer[:buffer_length] =
    latent @ weight.T` with torch.matmul (cuBLAS) on the contiguous rows."""
    if buffer_length <= 0 or cache_offsets.shape[0] == 0:
        return
    cfg = config or decompress_heuristic(interpret=interpreter_enabled())
    _gather_rows(buffer_row_offsets, cache_offsets, lookup_table, blocks, scales, quant_granularity, layer_idx,
                 k_latent_buffer, buffer_length, cfg)
    torch.mm(k_latent_buffer[:buffer_length], weight.t(), out=k_buffer[:buffer_length])


# sequences scanned per vector load when a prefill program finds its sequence
_SEARCH_BLOCK = 128


def _head_block(size: int) -> int:
    """Padded tile width of a head dimension: a power of two, and >= 16 for tl.dot."""
    return max(16, triton.next_power_of_2(size))


def _tma_2d(x: torch.Tensor, width: int) -> torch.Tensor | None:
    """`x` [rows, heads, width] (or [rows, width]) as a 2-D view whose row holds every head's columns
    (`[rows, (heads - 1) * head_stride + width]`), or None when TMA cannot read it (unit last stride, 16-byte
    aligned base, row and head strides)."""
    if x.dim() == 2:
        x = x[:, None]
    rows, heads, _ = x.shape
    cols = (heads - 1) * x.stride(1) + width
    ok = (x.dtype == torch.bfloat16 and x.stride(-1) == 1 and x.data_ptr() % 16 == 0 and 0 < rows < 2 ** 31
          and cols < 2 ** 31 and (x.stride(0) * 2) % 16 == 0 and (heads == 1 or (x.stride(1) * 2) % 16 == 0))
    return x.as_strided((rows, cols), (x.stride(0), 1)) if ok else None


def _ws_ready(q, k, v, blocks, scales, mask_code: int) -> bool:
    """Whether the warp-specialized kernel (`kernels.prefill_ws`) takes this call: bf16, DeepSeek's head sizes,
    the null or causal mask, an unscaled cache, TMA-readable q, k and v."""
    return (_WS_AVAILABLE and mask_code in (0, 1) and scales is None and blocks.dtype == torch.bfloat16
            and q.shape[-1] == 192 and k.shape[-1] == 128 and v.shape[-1] == 128 and blocks.shape[5] >= 192
            and all(_tma_2d(x, x.shape[-1]) is not None for x in (q, k, v)))


def _launch_ws(cfg: PrefillConfig, q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, blocks,
               cache_lengths, lookup_table, layer_idx: int, scale: float, mask_code: int, out, lse) -> None:
    """The warp-specialized prefill: the chunk's rope rows gathered into a contiguous buffer (the TMA copies
    need one), then `_prefill_ws_kernel` over the Triton kernel's grid."""
    num_rows, num_heads, _ = q.shape
    batch = cache_lengths.shape[0]
    buffer_rows = k.shape[0]
    rope = torch.empty((buffer_rows, 64), dtype=torch.bfloat16, device=q.device)
    _gather_rows(buffer_row_offsets, cache_offsets, lookup_table, blocks[..., blocks.shape[5] - 64:], None, 0,
                 layer_idx, rope, buffer_rows, decompress_heuristic())

    def desc(x2d, block):
        return GluonTensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block,
                                                                                                  gl.bfloat16))
    q2d, k2d, v2d, o2d = _tma_2d(q, 192), _tma_2d(k, 128), _tma_2d(v, 128), _tma_2d(out, 128)
    bn = cfg.block_n
    slots = num_rows // 128 + batch
    _prefill_ws_kernel[(slots, num_heads)](
        desc(q2d, [64, 128]), desc(q2d, [64, 64]), desc(k2d, [bn, 128]), desc(rope, [bn, 64]), desc(v2d, [bn, 128]),
        # without a TMA-readable output every row leaves by pointer stores and this descriptor is never read
        desc(o2d if o2d is not None else q2d, [64, 128]), out, lse, buffer_row_offsets, cache_offsets,
        input_row_offsets, cache_lengths, batch, scale * math.log2(math.e), q.stride(1), k.stride(1), v.stride(1),
        out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1),
        CAUSAL=mask_code == 1, TMA_OUT=o2d is not None, BLOCK_N=bn, STAGES=cfg.num_stages,
        SEARCH_CHUNKS=triton.cdiv(batch, _SEARCH_BLOCK), SEARCH_BLOCK=_SEARCH_BLOCK, CONSUMER_REGS=240,
        num_warps=4,
    )


def mla_prefill_kv_cache_ragged(q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, blocks,
                                cache_lengths, lookup_table, scales, quant_granularity: int, layer_idx: int,
                                scale: float, mask_code: int, window: int, out, lse,
                                config: PrefillConfig | None = None) -> None:
    """Ragged MLA prefill over one decompressed chunk into out [T, H, Dv] and lse [T, H] (float32)."""
    num_rows, num_heads, qk_dim = q.shape
    batch = cache_lengths.shape[0]
    if num_rows == 0 or batch == 0:
        return
    interpret = interpreter_enabled()
    hopper = not interpret and is_hopper(q.device)
    cfg = config or prefill_heuristic(fp8_cache=scales is not None, interpret=interpret, num_heads=num_heads,
                                      rows_per_sequence=num_rows / batch, hopper=hopper)
    # the kernel's shared memory holds 2-3 stages of 64- or 128-key blocks; one stage would deadlock its rings
    ws_config = cfg.block_n in (64, 128) and cfg.num_stages in ((2, 3) if cfg.block_n == 64 else (2,))
    if cfg.warp_specialized and ws_config and hopper and _ws_ready(q, k, v, blocks, scales, mask_code):
        _launch_ws(cfg, q, k, v, buffer_row_offsets, cache_offsets, input_row_offsets, blocks, cache_lengths,
                   lookup_table, layer_idx, scale, mask_code, out, lse)
        return
    if cfg.warp_specialized:  # calls the warp-specialized kernel does not take: the Triton kernel's tiles
        cfg = prefill_heuristic(fp8_cache=scales is not None, interpret=interpret, num_heads=num_heads,
                                rows_per_sequence=num_rows / batch)
    nope, v_dim = k.shape[-1], v.shape[-1]
    rope = qk_dim - nope
    scales_ptr, (s_b, s_l, s_s), group, scaled = _scales_args(blocks, scales, quant_granularity)
    # sequence b owns tile slots [offsets[b] // block_m + b, offsets[b+1] // block_m + b + 1)
    slots = num_rows // cfg.block_m + batch
    grid = (slots * num_heads,) if cfg.heads_inner else (slots, num_heads)
    _mla_prefill_kernel[grid](
        q, k, v, out, lse, buffer_row_offsets, cache_offsets, input_row_offsets, cache_lengths, lookup_table,
        blocks, scales_ptr,
        batch, num_heads, layer_idx, window, scale * math.log2(math.e), blocks.shape[5] - rope,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), out.stride(2), lse.stride(0), lse.stride(1), lookup_table.stride(0),
        blocks.stride(0), blocks.stride(2), blocks.stride(3), s_b, s_l, s_s,
        D_NOPE=nope, D_ROPE=rope, D_V=v_dim,
        BLOCK_DN=_head_block(nope), BLOCK_DR=_head_block(rope), BLOCK_DV=_head_block(v_dim),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, MASK=mask_code, PAGE_SIZE=blocks.shape[3], GROUP=group,
        SCALED=scaled, SEARCH_CHUNKS=triton.cdiv(batch, _SEARCH_BLOCK), SEARCH_BLOCK=_SEARCH_BLOCK,
        INTERPRET=interpret, HEADS_INNER=cfg.heads_inner,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
