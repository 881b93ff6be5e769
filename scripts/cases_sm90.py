"""Named kernel configurations for `compile_sm90.py`: pointer types and constexprs of the hot kernels at
DeepSeek sizes (576 = 512 latent + 64 rope, page size 64)."""

from __future__ import annotations

from functools import partial

import triton.language as tl


def decode(fp8: bool, block_m: int, block_n: int, warps: int, stages: int, prefetch: bool | None = None,
           interior: bool | None = None):
    """The dense decode: bf16 cache and q, or the rope-aware FP8 row with a bf16 q."""
    from pagedmla.kernels.mla_decode import _mla_decode_kernel
    types = {n: "*bf16" for n in ("q_ptr", "out_ptr", "rope_ptr", "q_rope_ptr")}
    types.update({"blocks_ptr": "*fp8e4nv" if fp8 else "*bf16", "lse_ptr": "*fp32", "offsets_ptr": "*i32",
                  "cache_lengths_ptr": "*i32", "lookup_ptr": "*i32", "schedule_ptr": "*i32", "sink_ptr": "*fp32",
                  "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32", "scales_ptr": "*fp32", "q_scale_ptr": "*fp32"})
    const = dict(KV_LORA_RANK=512, ROPE_DIM=64, BLOCK_M=block_m, BLOCK_N=block_n, HAS_SINK=False,
                 BLOCK_IN_PAGE=True, IEEE=False, INTERPRET=False, QUANT=fp8, Q_SCALED=False, G=640 if fp8 else 576,
                 LAT_MODE=1 if fp8 else 0, LAT_NG=1, LAT_GS=512, ROPE_MODE=0, ROPE_NG=1, ROPE_GS=64,
                 CD=tl.bfloat16, ROPE_AWARE=fp8, ROPE_OFF=256 if fp8 else 512, Q_ROPE_OFF=512, SPLIT_QS=False,
                 PREFETCH_TABLE=fp8 if prefetch is None else prefetch,
                 UNMASKED_INTERIOR=(not fp8 and block_m >= 64) if interior is None else interior, PDL=True)
    return _mla_decode_kernel, types, const, warps, stages


def sparse(fp8: bool, block_m: int, block_n: int, warps: int, stages: int, prefetch: bool):
    """The sparse decode, one index row per sequence (fold), rope-aware FP8 row or bf16 cache, bf16 q."""
    from pagedmla.kernels.mla_sparse_decode import _mla_sparse_decode_kernel
    cache = "*fp8e4nv" if fp8 else "*bf16"
    types = {n: "*bf16" for n in ("q_ptr", "q_rope_ptr", "out_ptr", "rope_ptr", "x_rope_ptr")}
    types.update({n: "*fp32" for n in ("q_scale_ptr", "lse_ptr", "part_out_ptr", "part_lse_ptr", "sink_ptr",
                                       "scales_ptr", "x_scales_ptr")})
    types.update({n: "*i32" for n in ("offsets_ptr", "idx_ptr", "topk_len_ptr", "x_idx_ptr", "x_topk_len_ptr")})
    types.update({"blocks_ptr": cache, "x_blocks_ptr": cache})
    const = dict(KV_LORA_RANK=512, ROPE_DIM=64, Q_ROPE_OFF=512, ROPE_OFF=256 if fp8 else 512, G=640,
                 LAT_MODE=1 if fp8 else 0, LAT_NG=1, LAT_GS=512, ROPE_MODE=0, ROPE_NG=1, ROPE_GS=64,
                 X_G=640, X_LAT_MODE=0, X_LAT_NG=1, X_LAT_GS=512, X_ROPE_MODE=0, X_ROPE_NG=1, X_ROPE_GS=64,
                 FOLD=True, HAS_EXTRA=False, HAS_SINK=False, Q_SCALED=False, SPLIT_QS=False, SPLIT=False,
                 SEARCH_STEPS=8, CD=tl.bfloat16, BLOCK_M=block_m, BLOCK_N=block_n, INTERPRET=False, IEEE=False,
                 PREFETCH_INDICES=prefetch, PDL=True)
    return _mla_sparse_decode_kernel, types, const, warps, stages


CASES = {
    "decode-bf16-h16": lambda: decode(False, 16, 64, 8, 5),
    "decode-bf16-h128": lambda: decode(False, 64, 64, 8, 2),
    "decode-bf16-h128-b16": lambda: decode(False, 64, 32, 8, 5),
    "decode-fp8-h16": lambda: decode(True, 16, 64, 8, 3),
    "decode-fp8-h128": lambda: decode(True, 64, 32, 8, 3),
    "sparse-fp8-h128": lambda: sparse(True, 64, 64, 8, 2, False),  # the heuristic's tile
    "sparse-bf16-h16": lambda: sparse(False, 16, 32, 4, 3, True),
}


def decode_grouped(block_m: int, block_n: int, warps: int, stages: int, fp8_q: bool = True):
    """The dense decode on a plain FP8 cache with one scale per 128 columns (latent in 4 groups, rope in one)."""
    fn, types, const, _, _ = decode(True, block_m, block_n, warps, stages)
    if fp8_q:
        types.update({"q_ptr": "*fp8e4nv", "q_rope_ptr": "*fp8e4nv"})
    types["rope_ptr"] = "*fp8e4nv"
    const.update(G=128, LAT_MODE=2, LAT_NG=4, LAT_GS=128, ROPE_MODE=1, ROPE_AWARE=False, ROPE_OFF=512,
                 Q_SCALED=fp8_q)
    return fn, types, const, warps, stages


CASES.update({f"decode-fp8g128-m{m}-n{n}-s{s}": partial(decode_grouped, m, n, 8, s)
              for m, n, s in ((16, 64, 3), (16, 64, 2), (64, 64, 2), (64, 32, 3))})


def prefill(block_m: int, block_n: int, warps: int, stages: int):
    """The ragged prefill attention (q/k 128 + rope 64 from the cache, v 128), causal, bf16."""
    from pagedmla.kernels.prefill import _mla_prefill_kernel
    types = {n: "*bf16" for n in ("q_ptr", "k_ptr", "v_ptr", "out_ptr", "blocks_ptr")}
    types.update({n: "*i32" for n in ("bro_ptr", "co_ptr", "offsets_ptr", "cache_lengths_ptr", "lookup_ptr")})
    types.update({"lse_ptr": "*fp32", "scales_ptr": "*fp32"})
    const = dict(D_NOPE=128, D_ROPE=64, D_V=128, BLOCK_DN=128, BLOCK_DR=64, BLOCK_DV=128, BLOCK_M=block_m,
                 BLOCK_N=block_n, MASK=1, PAGE_SIZE=64, GROUP=576, SCALED=False, SEARCH_CHUNKS=1, SEARCH_BLOCK=64,
                 INTERPRET=False, HEADS_INNER=True)
    return _mla_prefill_kernel, types, const, warps, stages


CASES.update({f"prefill-m{m}-n{n}-w{w}-s{s}": partial(prefill, m, n, w, s)
              for m, n, w, s in ((128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3),
                                 (64, 128, 4, 2), (128, 64, 8, 4), (64, 64, 4, 2), (64, 64, 4, 3), (64, 128, 4, 1),
                                 (128, 64, 8, 2))})


def prefill_fp8(block_m: int, block_n: int, warps: int, stages: int, group: int = 64):
    """The prefill attention with the rope columns read from an FP8 cache (one scale per `group` columns)."""
    fn, types, const, _, _ = prefill(block_m, block_n, warps, stages)
    types["blocks_ptr"] = "*fp8e4nv"
    const.update(SCALED=True, GROUP=group)
    return fn, types, const, warps, stages


CASES.update({f"prefill-fp8-m{m}-n{n}-s{s}": partial(prefill_fp8, m, n, 8, s)
              for m, n, s in ((128, 64, 3), (128, 64, 4), (128, 128, 2))})



def decode_fp8_heuristic(heads: int, max_q: int, granularity: int, fp8_q: bool, programs_per_sm: int = 1):
    """The FP8 dense decode with the config the heuristic picks: rope-aware row (granularity 0) or a plain FP8
    cache with one scale per `granularity` columns, bf16 or FP8 q; `programs_per_sm` as the launcher passes it."""
    import torch

    from pagedmla.configs.decode import block_m_for, heuristic
    from pagedmla.ops._fp8_tiles import _tile_mode
    if granularity:
        lat, rope = _tile_mode(0, 512, granularity), _tile_mode(512, 64, granularity)
    else:
        lat, rope = (1, 1, 512), (0, 1, 64)
    cfg = heuristic(num_heads=heads, max_q=max_q, kv_lora_rank=512, rope_dim=64,
                    q_dtype=torch.float8_e4m3fn if fp8_q else torch.bfloat16, cache_dtype=torch.float8_e4m3fn,
                    compute_dtype=torch.bfloat16, tile_scales=lat[0] in (2, 3), programs_per_sm=programs_per_sm)
    assert cfg.block_m == block_m_for(heads, max_q)
    fn, types, const, _, _ = decode(True, cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages,
                                    prefetch=cfg.prefetch_table)
    if fp8_q:
        types.update({"q_ptr": "*fp8e4nv"})
        types["q_rope_ptr"] = "*bf16" if not granularity else "*fp8e4nv"
    if granularity:
        types["rope_ptr"] = "*fp8e4nv"
        const.update(ROPE_AWARE=False, ROPE_OFF=512)
    const.update(G=granularity or 640, LAT_MODE=lat[0], LAT_NG=lat[1], LAT_GS=lat[2], ROPE_MODE=rope[0],
                 ROPE_NG=rope[1], ROPE_GS=rope[2], Q_SCALED=fp8_q, SPLIT_QS=fp8_q and not granularity)
    return fn, types, const, cfg.num_warps, cfg.num_stages


CASES.update({f"heuristic-fp8-h{h}-q{q}-g{g}-{'fp8q' if f else 'bf16q'}": partial(decode_fp8_heuristic, h, q, g, f)
              for h, q in ((16, 1), (16, 2), (128, 1)) for g in (0, 576, 128, 96) for f in (False, True)})
# the launcher's two-programs-per-SM picks (each must fit in half an SM's shared memory)
CASES.update({f"heuristic-fp8-h16-q1-g{g}-{'fp8q' if f else 'bf16q'}-2sm": partial(decode_fp8_heuristic, 16, 1, g, f, 2)
              for g in (0, 576, 128) for f in (False, True)})


def decode_bf16_heuristic(heads: int, max_q: int, batch: int):
    """The bf16 dense decode with the config the heuristic picks."""
    import torch

    from pagedmla.configs.decode import heuristic
    cfg = heuristic(num_heads=heads, max_q=max_q, kv_lora_rank=512, rope_dim=64, q_dtype=torch.bfloat16,
                    cache_dtype=torch.bfloat16, batch=batch)
    return decode(False, cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages, prefetch=cfg.prefetch_table,
                  interior=cfg.unmasked_interior)


CASES.update({f"heuristic-bf16-h{h}-q{q}-b{b}": partial(decode_bf16_heuristic, h, q, b)
              for h, q, b in ((16, 1, 64), (16, 1, 16), (16, 2, 64), (128, 1, 64), (128, 1, 1))})


def prefill_heuristic_case(fp8_cache: bool, rows_per_sequence: float):
    """The prefill attention with the config the heuristic picks (rope columns from a bf16 or FP8 cache)."""
    from pagedmla.configs.prefill import prefill_heuristic
    cfg = prefill_heuristic(fp8_cache=fp8_cache, rows_per_sequence=rows_per_sequence)
    make = prefill_fp8 if fp8_cache else prefill
    return make(cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages)


CASES.update({f"heuristic-prefill-{'fp8' if f else 'bf16'}-rows{r}": partial(prefill_heuristic_case, f, r)
              for f in (False, True) for r in (1024, 8192)})


def decode_spec(name: str):
    """Any dense decode config by name: `decode-{bf16|fp8}-m<M>-n<N>-w<W>-s<S>[-prefetch][-interior|-masked]`
    (the last: `unmasked_interior` on or off; default: on for bf16 64-row tiles), or None."""
    import re
    hit = re.fullmatch(r"decode-(bf16|fp8)-m(\d+)-n(\d+)-w(\d+)-s(\d+)(-prefetch)?(-interior|-masked)?", name)
    if not hit:
        return None
    kind, m, n, w, s, prefetch, interior = hit.groups()
    return partial(decode, kind == "fp8", int(m), int(n), int(w), int(s), bool(prefetch),
                   None if interior is None else interior == "-interior")


def combine(block_p: int, block_r: int, block_dv: int, warps: int, block_t: int = 0):
    """The split-KV combine of the dense decode (bf16 out, float32 partials)."""
    from pagedmla.kernels.mla_decode import _mla_decode_combine_kernel
    types = {"out_ptr": "*bf16", "lse_ptr": "*fp32", "offsets_ptr": "*i32", "schedule_ptr": "*i32",
             "sink_ptr": "*fp32", "part_out_ptr": "*fp32", "part_lse_ptr": "*fp32"}
    const = dict(BLOCK_R=block_r, BLOCK_DV=block_dv, BLOCK_P=block_p, HAS_SINK=False, PDL=True, BLOCK_T=block_t)
    return _mla_decode_combine_kernel, types, const, warps, 1


CASES.update({f"combine-p{p}-r{r}-dv{d}-w{w}": partial(combine, p, r, d, w)
              for p, r, d, w in ((4, 8, 128, 4), (2, 8, 128, 4), (2, 4, 512, 4), (1, 16, 128, 4), (64, 1, 64, 4),
                                 (128, 1, 32, 1))})
CASES["combine-p64+4-r1-dv32-w1"] = partial(combine, 64, 1, 32, 1, 4)


def sparse_combine(block_s: int = 4, block_r: int = 4, block_dv: int = 512, warps: int = 4):
    """The split combine of the sparse decode (bf16 out, float32 partials, a sink)."""
    from pagedmla.kernels.mla_sparse_decode import _mla_sparse_decode_combine_kernel
    types = {"out_ptr": "*bf16", "lse_ptr": "*fp32", "sink_ptr": "*fp32", "part_out_ptr": "*fp32",
             "part_lse_ptr": "*fp32"}
    const = dict(BLOCK_R=block_r, BLOCK_DV=block_dv, BLOCK_S=block_s, HAS_SINK=True, INTERPRET=False, PDL=True)
    return _mla_sparse_decode_combine_kernel, types, const, warps, 1


CASES["sparse-combine"] = sparse_combine


def split_dv(block_m: int, block_n: int, warps: int, stages: int, dv_splits: int, q_in_regs: bool = False):
    """benchmarks/experiments/split_dv_decode.py: 128 heads, output columns split across programs."""
    import sys
    sys.path.insert(0, __file__.rsplit("/", 2)[0] + "/benchmarks/experiments")
    from split_dv_decode import _split_dv_kernel
    types = {"q_ptr": "*bf16", "out_ptr": "*bf16", "blocks_ptr": "*bf16", "lookup_ptr": "*i32"}
    const = dict(NUM_HEADS=128, KV_LORA_RANK=512, ROPE_DIM=64, BLOCK_M=block_m, BLOCK_N=block_n,
                 DV_SPLITS=dv_splits, Q_IN_REGS=q_in_regs)
    return _split_dv_kernel, types, const, warps, stages


CASES.update({f"split-dv-m{m}-n{n}-w{w}-s{s}-d{d}": partial(split_dv, m, n, w, s, d)
              for m, n, w, s, d in ((64, 32, 4, 2, 2), (64, 64, 8, 2, 1), (128, 16, 8, 2, 2), (128, 16, 8, 3, 2),
                                    (128, 32, 8, 2, 2), (128, 16, 8, 2, 4), (128, 32, 8, 2, 4), (128, 16, 8, 4, 4))})



def k_matmul(block_m: int, block_n: int, block_k: int, warps: int, stages: int, split: int, tail_n: int,
             tail_split: int, stream: bool = False, tail_in_main: bool = False):
    """The projection GEMM into the cache, TMA-fed (DeepSeek's 7168 -> 576 K row, bf16); `stream`: the stream-K
    kernel (split and tail_split unused)."""
    from pagedmla.kernels.cache_write import _matmul_to_cache_kernel, _matmul_to_cache_stream_kernel
    types = {"x": f"tensordesc<bf16[{block_m},{block_k}]>", "w": f"tensordesc<bf16[{block_n},{block_k}]>",
             "w_tail": f"tensordesc<bf16[{tail_n or block_n},{block_k}]>", "blocks_ptr": "*bf16",
             "offsets_ptr": "*i32", "cache_lengths_ptr": "*i32", "lookup_ptr": "*i32", "partial_ptr": "*fp32",
             "count_ptr": "*i32"}
    const = dict(K=7168, NUM_HEADS=1, HEAD_SIZE=576, SEARCH_STEPS=4, BLOCK_M=block_m, BLOCK_N=block_n,
                 BLOCK_K=block_k, TAIL_N=tail_n, USE_TMA=True, IEEE=False, INTERPRET=False)
    if stream:
        del const["TAIL_N"]
        const["BN2"] = tail_n
        types["w2"] = types.pop("w_tail")
        return _matmul_to_cache_stream_kernel, types, const, warps, stages
    const.update(GROUP_M=8, SPLIT_K=split, TAIL_SPLIT_K=tail_split, TAIL_IN_MAIN=tail_in_main)
    return _matmul_to_cache_kernel, types, const, warps, stages


CASES.update({"k-matmul-heuristic-4096": partial(k_matmul, 128, 128, 64, 8, 3, 1, 64, 2),
              "k-matmul-tail-in-main-w4-s5": partial(k_matmul, 128, 128, 64, 4, 5, 1, 64, 4, tail_in_main=True),
              "k-matmul-stream-s3": partial(k_matmul, 128, 128, 64, 8, 3, 1, 64, 1, True),
              "k-matmul-stream-s4": partial(k_matmul, 128, 128, 64, 8, 4, 1, 64, 1, True)})


def prefill_ws(block_n: int, stages: int):
    """The warp-specialized Gluon prefill (`kernels.prefill_ws`), causal, with the TMA descriptors the launcher
    builds for DeepSeek's head sizes (k and v as views of one [T, H, 256] buffer)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from pagedmla.kernels.prefill_ws import _prefill_ws_kernel
    from pagedmla.ops._triton_prefill import _tma_2d

    rows, heads = 1024, 4
    q = torch.empty(rows, heads, 192, dtype=torch.bfloat16)
    kv = torch.empty(rows, heads, 256, dtype=torch.bfloat16)
    out = torch.empty(rows, heads, 128, dtype=torch.bfloat16)
    rope = torch.empty(rows, 64, dtype=torch.bfloat16)

    def desc(x2d, block):
        return TensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))
    q2d = _tma_2d(q, 192)
    descs = {"qn_desc": desc(q2d, [64, 128]), "qr_desc": desc(q2d, [64, 64]),
             "k_desc": desc(_tma_2d(kv[..., :128], 128), [block_n, 128]), "kr_desc": desc(rope, [block_n, 64]),
             "v_desc": desc(_tma_2d(kv[..., 128:], 128), [block_n, 128]), "o_desc": desc(_tma_2d(out, 128), [64, 128])}
    types = {name: mangle_type(d) for name, d in descs.items()}
    types.update(out_ptr="*bf16", lse_ptr="*fp32", bro_ptr="*i32", co_ptr="*i32", offsets_ptr="*i32",
                 cache_lengths_ptr="*i32")
    const = dict(CAUSAL=True, TMA_OUT=True, BLOCK_N=block_n, STAGES=stages, SEARCH_CHUNKS=1, SEARCH_BLOCK=128,
                 CONSUMER_REGS=240)
    return _prefill_ws_kernel, types, const, 4, stages


CASES.update({"prefill-ws": partial(prefill_ws, 128, 2), "prefill-ws-n64-s3": partial(prefill_ws, 64, 3)})


def decode_ws(tma_out: bool = True):
    """The warp-specialized Gluon decode (`kernels.mla_decode_ws`) with the descriptors its launcher builds
    for DeepSeek's dims (128 heads, a 64-slot page cache of 2 layers)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from pagedmla.kernels.mla_decode_ws import _mla_decode_ws_kernel
    from pagedmla.ops._triton_decode import _ws_cache_rows, _ws_out_rows, _ws_q_rows

    q = torch.empty(8, 128, 576, dtype=torch.bfloat16)
    out = torch.empty(8, 128, 512, dtype=torch.bfloat16)
    part = torch.empty(64, 512, dtype=torch.float32)
    blocks = torch.empty(16, 1, 2, 64, 1, 576, dtype=torch.bfloat16)
    cache2d = _ws_cache_rows(blocks, 1)[0]
    q2d = _ws_q_rows(q)

    def desc(x2d, block):
        dtype = gl.float32 if x2d.dtype == torch.float32 else gl.bfloat16
        return TensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    descs = {"q_desc": desc(q2d, [64, 256]), "qr_desc": desc(q2d, [64, 64]), "k_desc": desc(cache2d, [64, 256]),
             "kr_desc": desc(cache2d, [64, 64]), "out_desc": desc(_ws_out_rows(out), [64, 256]),
             "po_desc": desc(part, [64, 64])}
    types = {name: mangle_type(d) for name, d in descs.items()}
    types.update(out_ptr="*bf16", lse_ptr="*fp32", offsets_ptr="*i32", cache_lengths_ptr="*i32", lookup_ptr="*i32",
                 schedule_ptr="*i32", sink_ptr="*fp32", part_out_ptr="*fp32", part_lse_ptr="*fp32")
    const = dict(HAS_SINK=True, CONSUMER_REGS=240, TMA_OUT=tma_out)
    return _mla_decode_ws_kernel, types, const, 4, 2


CASES.update({"decode-ws": decode_ws, "decode-ws-register-stores": partial(decode_ws, False)})


def decode_ws16(sink: bool = True, registers: bool = False):
    """The warp-specialized 16-row Gluon decode over the rope-aware FP8 cache (`kernels.mla_decode_ws16`, or with
    `registers` `kernels.mla_decode_ws16_rs`) with the descriptors its launcher builds (16 heads, a 64-slot page
    cache of 2 layers)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from pagedmla.kernels.mla_decode_ws16 import _mla_decode_ws16_kernel
    from pagedmla.kernels.mla_decode_ws16_rs import _mla_decode_ws16_rs_kernel
    from pagedmla.ops import _triton_decode as td

    q = torch.empty(8, 16, 576, dtype=torch.bfloat16)
    blocks = torch.empty(16, 1, 2, 64, 1, 640, dtype=torch.float8_e4m3fn)
    lat2d = td._ws_cache_rows(blocks, 1, torch.float8_e4m3fn)[0]
    rows32 = lat2d.view(torch.uint8).view(torch.int32)
    q2d = td._ws_q_rows(q)

    def desc(x2d, block, dtype):
        return TensorDescriptor.from_tensor(x2d, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    ring = gl.NVMMASharedLayout(128 if registers else 0, 32, 2)
    descs = {"q_desc": desc(q2d, [16, 128], gl.bfloat16), "qr_desc": desc(q2d, [16, 64], gl.bfloat16),
             "lat_desc": TensorDescriptor.from_tensor(rows32, [32, 32] if registers else [32, 128], ring),
             "rope_desc": TensorDescriptor.from_tensor(rows32, [32, 32], ring)}
    types = {name: mangle_type(d) for name, d in descs.items()}
    types.update(out_ptr="*bf16", lse_ptr="*fp32", offsets_ptr="*i32", cache_lengths_ptr="*i32", lookup_ptr="*i32",
                 schedule_ptr="*i32", sink_ptr="*fp32", part_out_ptr="*fp32", part_lse_ptr="*fp32",
                 scales_ptr="*fp32")
    if registers:
        const = dict(HAS_SINK=sink, SLOTS=td.WS16_RS_SLOTS, CONSUMER_REGS=td.WS16_RS_CONSUMER_REGS,
                     LOADER_REGS=td.WS16_RS_LOADER_REGS)
        return _mla_decode_ws16_rs_kernel, types, const, 4, 1
    const = dict(HAS_SINK=sink, SLOTS=td.WS16_SLOTS, WIDEN_WARPS=td.WS16_WIDEN_WARPS,
                 WIDEN_REGS=td.WS16_WIDEN_REGS,
                 LOADER_REGS=td.WS16_LOADER_REGS)
    return _mla_decode_ws16_kernel, types, const, 4, 1


CASES.update({"decode-ws16": decode_ws16, "decode-ws16-rs": partial(decode_ws16, registers=True),
              "decode-ws16-rs-nosink": partial(decode_ws16, sink=False, registers=True)})


def sparse_ring(slots: int, dtype: str = "bf16", sink: bool = True, split: bool = True):
    """The Gluon 16-row sparse decode (`kernels.mla_sparse_decode_ring`) with a ring of `slots` 32-key blocks:
    a bf16/fp16 cache, or `dtype` "fp8" for the rope-aware FP8 row (bf16 q)."""
    from pagedmla.kernels.mla_sparse_decode_ring import _mla_sparse_decode_ring_kernel
    fp8 = dtype == "fp8"
    q_type = "*bf16" if fp8 else f"*{dtype}"
    types = {"q_ptr": q_type, "out_ptr": q_type, "rope_ptr": q_type, "blocks_ptr": "*fp8e4nv" if fp8 else q_type}
    types.update({n: "*fp32" for n in ("lse_ptr", "part_out_ptr", "part_lse_ptr", "sink_ptr", "scales_ptr")})
    types.update({n: "*i32" for n in ("offsets_ptr", "idx_ptr", "topk_len_ptr")})
    const = dict(PAGE_SIZE=64, ROPE_OFF=256 if fp8 else 512, HAS_SINK=sink, SPLIT=split, NUM_SLOTS=slots)
    return _mla_sparse_decode_ring_kernel, types, const, 4, 1


CASES.update({f"sparse-ring-s{s}": partial(sparse_ring, s) for s in (2, 3, 4, 5)})
CASES.update({"sparse-ring-s2-fp16-whole": partial(sparse_ring, 2, "fp16", False, False),
              "sparse-ring-s2-fp8": partial(sparse_ring, 2, "fp8"), "sparse-ring-s3-fp8": partial(sparse_ring, 3, "fp8")})


def decode_ring(slots: int, dtype: str = "bf16", sink: bool = True, page_size: int = 64):
    """The Gluon 16-row dense decode (`kernels.mla_decode_ring`) with a ring of `slots` 32-key blocks: a bf16/fp16
    cache, or `dtype` "fp8" for the rope-aware FP8 row (bf16 q)."""
    from pagedmla.kernels.mla_decode_ring import _mla_decode_ring_kernel
    fp8 = dtype == "fp8"
    q_type = "*bf16" if fp8 else f"*{dtype}"
    types = {"q_ptr": q_type, "out_ptr": q_type, "rope_ptr": q_type, "blocks_ptr": "*fp8e4nv" if fp8 else q_type}
    types.update({n: "*fp32" for n in ("lse_ptr", "part_out_ptr", "part_lse_ptr", "sink_ptr", "scales_ptr")})
    types.update({n: "*i32" for n in ("offsets_ptr", "cache_lengths_ptr", "lookup_ptr", "schedule_ptr")})
    const = dict(PAGE_SIZE=page_size, ROPE_OFF=256 if fp8 else 512, HAS_SINK=sink, NUM_SLOTS=slots)
    return _mla_decode_ring_kernel, types, const, 4, 1


CASES.update({f"decode-ring-s{s}": partial(decode_ring, s) for s in (2, 3)})
CASES.update({"decode-ring-s2-fp16-p16": partial(decode_ring, 2, "fp16", False, 16),
              "decode-ring-s2-fp8": partial(decode_ring, 2, "fp8")})


def sparse_ws(sink: bool = True, split: bool = True, fold: bool = False):
    """The warp-specialized Gluon 64-row sparse decode (`kernels.mla_sparse_decode_ws`) over the rope-aware FP8
    row with a bf16 q, with the q descriptors its launcher builds (128 heads)."""
    import torch
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    from pagedmla.kernels.mla_sparse_decode_ws import _mla_sparse_decode_ws_kernel
    from pagedmla.ops._triton_decode import _ws_q_rows

    q2d = _ws_q_rows(torch.empty(8, 128, 576, dtype=torch.bfloat16))

    def desc(block):
        return TensorDescriptor.from_tensor(q2d, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))
    descs = {"q_desc": desc([64, 256]), "qr_desc": desc([64, 64])}
    types = {name: mangle_type(d) for name, d in descs.items()}
    types.update(out_ptr="*bf16", rope_ptr="*bf16", blocks_ptr="*fp8e4nv")
    types.update({n: "*fp32" for n in ("lse_ptr", "part_out_ptr", "part_lse_ptr", "sink_ptr", "scales_ptr")})
    types.update({n: "*i32" for n in ("offsets_ptr", "idx_ptr", "topk_len_ptr")})
    const = dict(PAGE_SIZE=64, ROPE_OFF=256, FOLD=fold, HAS_SINK=sink, SPLIT=split, CONSUMER_REGS=240)
    return _mla_sparse_decode_ws_kernel, types, const, 4, 1


CASES.update({"sparse-ws": sparse_ws, "sparse-ws-whole": partial(sparse_ws, True, False),
              "sparse-ws-fold": partial(sparse_ws, False, False, True)})
