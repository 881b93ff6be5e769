"""The error contract of the public API (SPEC section 0, "Errors"): every bad input is a ValueError that names
the argument, what was expected and what came; never an assert, a crash deeper down or a silent answer.

One baseline of valid arguments per op (tiny: B=2 sequences with 3 and 5 cached tokens and 2 and 1 new ones,
page_size 4, head_size 80 = 64 latent + 16 rope, 2 layers, 2 query heads); each case breaks one argument.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import pagedmla as pm
from pagedmla.ops import _dispatch
from pagedmla.testing import make_paged_batch

HEAD, ROPE, RANK = 80, 16, 64
PS, LAYERS, H = 4, 2, 2
CACHE, NEW = (3, 5), (2, 1)
B, T = 2, 3
# N_b = 5, 6 -> 2 pages each; make_paged_batch adds 3 spare blocks and 2 spare table columns.
NUM_BLOCKS, TABLE_WIDTH = 7, 4
NOPE, VDIM = 32, 32
BUF = 16  # align_up(5, 4) + align_up(6, 4): the whole batch is one chunk of 16 rows
K_IN = 24
MHA_HEADS, MHA_HEAD = 2, 16
TOPK, EXTRA_TOPK = 4, 2
FP8 = torch.float8_e4m3fn
I32 = torch.int32


def says(*parts: str) -> str:
    """Regex: the literal parts in this order (argument name first, then expected, then received)."""
    return ".*".join(re.escape(p) for p in parts)


def case(override, match, id, *marks):
    return pytest.param(override, match, id=id, marks=marks)


def meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t, device="meta")


def strided(t: torch.Tensor) -> torch.Tensor:
    """Same values, stride 2 in the last dimension."""
    wide = t.new_empty(*t.shape[:-1], 2 * t.shape[-1])[..., ::2]
    wide.copy_(t)
    return wide


def i32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def mla_batch(**kw):
    return make_paged_batch(CACHE, NEW, head_size=HEAD, page_size=PS, num_layers=LAYERS, **kw)


def mha_batch(**kw):
    return make_paged_batch(CACHE, NEW, head_size=MHA_HEAD, num_heads=MHA_HEADS, is_mla=False, page_size=PS,
                            num_layers=LAYERS, **kw)


def with_table(kv, edit):
    table = kv.lookup_table.clone()
    edit(table)
    return kv.replace(lookup_table=table)


def fp8_cache(kv):
    return pm.quantize_kv_cache(kv, 16)


def meta_collection(kv):
    return pm.PagedKVCacheCollection(meta(kv.blocks), meta(kv.cache_lengths), meta(kv.lookup_table), kv.params)


# ---- valid arguments of every op (all by keyword) ----

def _k_matmul():
    pb = mla_batch()
    return {"hidden_state": torch.randn(T, K_IN), "input_row_offsets": pb.input_row_offsets,
            "weight": torch.randn(HEAD, K_IN), "kv_collection": pb.kv, "layer_idx": 1}


def _kv_matmul():
    pb = mha_batch()
    return {"hidden_state": torch.randn(T, K_IN), "input_row_offsets": pb.input_row_offsets,
            "weight": torch.randn(2 * MHA_HEADS * MHA_HEAD, K_IN), "kv_collection": pb.kv, "layer_idx": 1}


def _rms_norm():
    pb = mla_batch()
    return {"kv_collection": pb.kv, "gamma": torch.randn(RANK), "eps": 1e-6, "layer_idx": 1,
            "input_row_offsets": pb.input_row_offsets, "rms_norm_cols": RANK}


def _rope():
    pb = mla_batch()
    return {"q_rope": torch.randn(T, H, ROPE), "input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv,
            "freqs_cis": torch.randn(8, ROPE), "layer_idx": 1, "interleaved": True}


def _prefill_plan():
    pb = mla_batch()
    return {"input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv, "buffer_size": BUF, "max_chunks": 2}


def _decompress():
    pb = mla_batch()
    return {"buffer_row_offsets_1d": i32([0, 8, 16]), "cache_offsets_1d": i32([0, 0]), "buffer_length": BUF,
            "weight": torch.randn(H * (NOPE + VDIM), RANK), "kv_collection": pb.kv, "layer_idx": 1,
            "k_latent_buffer": torch.full((BUF, RANK), float("nan")),
            "k_buffer": torch.full((BUF, H * (NOPE + VDIM)), float("nan"))}


def _prefill():
    pb = mla_batch()
    return {"q": torch.randn(T, H, NOPE + ROPE), "k": torch.randn(BUF, H, NOPE), "v": torch.randn(BUF, H, VDIM),
            "buffer_row_offsets": i32([0, 8, 16]), "cache_offsets": i32([0, 0]),
            "input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv, "layer_idx": 1, "scale": 0.125}


def _mla_prefill():
    pb = mla_batch()
    return {"q": torch.randn(T, H, NOPE + ROPE), "input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv,
            "layer_idx": 1, "kv_b_proj_weight": torch.randn(H * (NOPE + VDIM), RANK), "scale": 0.125,
            "buffer_size": 8}


def _decode_plan():
    pb = mla_batch()
    return {"input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv, "num_heads": H}


def _decode():
    pb = mla_batch()
    return {"q": torch.randn(T, H, HEAD), "input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv,
            "layer_idx": 1, "scale": 0.125, "qk_rope_head_dim": ROPE}


def _physical_rows(pb, b, count):
    return [blk * PS + slot for blk, slot in pb.positions(b)][:count]


def _decode_sparse():
    """Sparse decode; every query token of a sequence shares its index row (so fold_shared_index is valid)."""
    pb = mla_batch()
    rows = [_physical_rows(pb, b, TOPK) for b, n in enumerate(NEW) for _ in range(n)]
    extra = make_paged_batch([4], [0], head_size=HEAD, page_size=PS, num_layers=LAYERS, seed=1)
    extra_rows = [_physical_rows(extra, 0, EXTRA_TOPK)] * T
    return {"q": torch.randn(T, H, HEAD), "input_row_offsets": pb.input_row_offsets, "kv_collection": pb.kv,
            "layer_idx": 1, "scale": 0.125, "qk_rope_head_dim": ROPE, "mask": "null", "indices": i32(rows),
            "topk_lengths": i32([TOPK, 3]), "extra_k": extra.kv, "extra_indices": i32(extra_rows),
            "extra_topk_lengths": i32([EXTRA_TOPK, 1]), "attn_sink": torch.randn(H)}


def _decode_fp8_q():
    a = _decode()
    a.update(kv_collection=fp8_cache(a["kv_collection"]), q=a["q"].to(FP8), q_scale=torch.rand(T) + 0.5)
    return a


def _decode_rope_aware():
    a = _decode()
    a.update(kv_collection=pm.quantize_kv_cache(a["kv_collection"], rope_aware=True, qk_rope_head_dim=ROPE),
             q=a["q"].to(torch.bfloat16), per_token_scale_rope_aware=True)
    return a


OPS = {
    "k_matmul_ragged_paged": (pm.k_matmul_ragged_paged, _k_matmul),
    "kv_matmul_ragged_paged": (pm.kv_matmul_ragged_paged, _kv_matmul),
    "rms_norm_key_cache": (pm.rms_norm_key_cache, _rms_norm),
    "fused_qk_rope_ragged": (pm.fused_qk_rope_ragged, _rope),
    "mla_prefill_plan": (pm.mla_prefill_plan, _prefill_plan),
    "mla_decompress_k_cache_ragged_paged": (pm.mla_decompress_k_cache_ragged_paged, _decompress),
    "mla_prefill_kv_cache_ragged": (pm.mla_prefill_kv_cache_ragged, _prefill),
    "mla_prefill": (pm.mla_prefill, _mla_prefill),
    "mla_decode_plan": (pm.mla_decode_plan, _decode_plan),
    "mla_decode_kv_cache_ragged": (pm.mla_decode_kv_cache_ragged, _decode),
}
VARIANTS = {
    **{name: builder for name, (_, builder) in OPS.items()},
    "mla_decode_kv_cache_ragged[sparse]": _decode_sparse,
    "mla_decode_kv_cache_ragged[fp8_q]": _decode_fp8_q,
    "mla_decode_kv_cache_ragged[rope_aware]": _decode_rope_aware,
}
ALL_OPS = list(OPS)
WRITE_OPS = ["k_matmul_ragged_paged", "kv_matmul_ragged_paged", "rms_norm_key_cache", "fused_qk_rope_ragged"]
LAYER_OPS = [op for op in ALL_OPS if op not in ("mla_prefill_plan", "mla_decode_plan")]
OFFSETS_OPS = [op for op in ALL_OPS if op != "mla_decompress_k_cache_ragged_paged"]
# Ops whose input_row_offsets[-1] must equal the rows of a tensor argument.
ROWS_OPS = [op for op in OFFSETS_OPS if op not in ("rms_norm_key_cache", "mla_prefill_plan", "mla_decode_plan")]
MLA_ONLY_OPS = [op for op in ALL_OPS if op not in ("kv_matmul_ragged_paged", "mla_prefill_plan")]
MASK_OPS = ["mla_prefill_kv_cache_ragged", "mla_prefill", "mla_decode_kv_cache_ragged"]


def args_of(variant: str, override=None, backend: str = "reference") -> dict:
    torch.manual_seed(0)
    args = VARIANTS[variant]()
    args["backend"] = backend
    if override is not None:
        args.update(override(args))
    return args


def call(variant: str, args: dict):
    return OPS[variant.split("[")[0]][0](**args)


def check(variant: str, override, match: str, exc=ValueError):
    args = args_of(variant, override)
    with pytest.raises(exc, match=match):
        call(variant, args)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_baseline_arguments_are_valid(variant):
    """Every case below breaks exactly one argument of these (huge ids in unused table columns are fine)."""
    call(variant, args_of(variant))


# ---- rules shared by the ops ----

@pytest.mark.parametrize("op", ALL_OPS)
def test_kv_collection_of_wrong_type(op):
    check(op, lambda a: {"kv_collection": a["kv_collection"].blocks},
          says("Invalid type of kv_collection", "expected PagedKVCacheCollection", "got Tensor"))


@pytest.mark.parametrize("op", MLA_ONLY_OPS)
def test_mla_op_on_mha_cache(op):
    check(op, lambda a: {"kv_collection": mha_batch().kv},
          says("Invalid kv_collection", "expected an MLA cache (is_mla=True)", "got is_mla=False"))


def test_kv_matmul_on_mla_cache():
    check("kv_matmul_ragged_paged", lambda a: {"kv_collection": mla_batch().kv},
          says("Invalid kv_collection", "expected an MHA cache (is_mla=False)", "got is_mla=True"))


@pytest.mark.parametrize("op", WRITE_OPS)
def test_write_into_fp8_cache(op):
    check(op, lambda a: {"kv_collection": fp8_cache(a["kv_collection"])},
          says("Invalid kv_collection", "expected a bfloat16/float16/float32 cache", "got float8_e4m3fn"))


@pytest.mark.parametrize("bad, match", [
    pytest.param(-1, says("Invalid layer_idx", "expected >= 0", "got -1"), id="negative"),
    pytest.param(LAYERS, says("Invalid layer_idx", f"expected <= {LAYERS - 1}", f"got {LAYERS}"), id="num_layers"),
    pytest.param(1.0, says("Invalid layer_idx", "expected an int", "got float"), id="float"),
    pytest.param(True, says("Invalid layer_idx", "expected an int", "got bool"), id="bool"),
])
@pytest.mark.parametrize("op", LAYER_OPS)
def test_layer_idx_out_of_range(op, bad, match):
    check(op, lambda a: {"layer_idx": bad}, match)


OFFSETS_CASES = [
    case(lambda a: {"input_row_offsets": [0, 2, 3]},
         says("Invalid type of input_row_offsets", "expected a torch.Tensor", "got list"), "not-a-tensor"),
    case(lambda a: {"input_row_offsets": i32([0, 2, 3, 3])},
         says("Invalid shape of input_row_offsets", f"expected ({B + 1}", f"got ({B + 2},)"), "batch-mismatch"),
    case(lambda a: {"input_row_offsets": i32([[0, 2, 3]])},
         says("Invalid rank of input_row_offsets", "expected 1", "got 2"), "rank-2"),
    case(lambda a: {"input_row_offsets": a["input_row_offsets"].long()},
         says("Invalid dtype of input_row_offsets", "expected int32", "got int64"), "int64"),
    case(lambda a: {"input_row_offsets": meta(a["input_row_offsets"])},
         says("Invalid device of input_row_offsets", "expected cpu", "got meta"), "meta-device"),
    case(lambda a: {"input_row_offsets": i32([1, 2, 3])},
         says("Invalid input_row_offsets", "expected input_row_offsets[0] == 0", "got 1"), "not-from-0"),
    case(lambda a: {"input_row_offsets": i32([0, 3, 2])},
         says("Invalid input_row_offsets", "non-decreasing", "input_row_offsets[1]=3 > input_row_offsets[2]=2"),
         "decreasing"),
    case(lambda a: {"kv_collection": a["kv_collection"].replace(
        lookup_table=a["kv_collection"].lookup_table[:, :1].contiguous())},
         says("Invalid kv_collection.lookup_table", "sequence 1 needs 6 tokens", f"expected at most {PS}"),
         "table-too-narrow"),
    case(lambda a: {"kv_collection": with_table(a["kv_collection"], lambda t: t[1, 1].fill_(NUM_BLOCKS))},
         says("Invalid kv_collection.lookup_table", f"expected block ids in [0, {NUM_BLOCKS})", f"to {NUM_BLOCKS}"),
         "block-id-past-pool"),
    case(lambda a: {"kv_collection": with_table(a["kv_collection"], lambda t: t[0, 0].fill_(-1))},
         says("Invalid kv_collection.lookup_table", f"expected block ids in [0, {NUM_BLOCKS})", "from -1"),
         "block-id-negative"),
]


@pytest.mark.parametrize("override, match", OFFSETS_CASES)
@pytest.mark.parametrize("op", OFFSETS_OPS)
def test_input_row_offsets(op, override, match):
    check(op, override, match)


@pytest.mark.parametrize("op", ROWS_OPS)
def test_input_row_offsets_end_must_equal_rows(op):
    check(op, lambda a: {"input_row_offsets": i32([0, 2, 2])},
          says("Invalid input_row_offsets", f"expected input_row_offsets[-1] == {T}", "got 2"))


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"mask": "sliding"}, says("Invalid mask", "expected one of", "got 'sliding'"), "unknown"),
    case(lambda a: {"mask": None}, says("Invalid mask", "expected one of", "got None"), "none"),
    *[case(lambda a, m=m, w=w: {"mask": m, "local_window_size": w},
           says("Invalid local_window_size", f"expected an int > 0 for mask '{m}'", f"got {w!r}"), f"{m}-W{w}")
      for m in ("sliding_window_causal", "sliding_window_noncausal", "chunked", "chunked_causal")
      for w in (0, -1)],
    case(lambda a: {"mask": "chunked", "local_window_size": 2.5},
         says("Invalid local_window_size", "expected an int > 0", "got 2.5"), "window-float"),
    case(lambda a: {"scale": "0.1"}, says("Invalid scale", "expected a float", "got str"), "scale-str"),
])
@pytest.mark.parametrize("op", MASK_OPS)
def test_mask_window_and_scale(op, override, match):
    check(op, override, match)


# ---- backends (ops/_dispatch.py) ----

BOGUS_LAUNCHER = "pagedmla._no_such_module:launch"


@pytest.fixture
def bogus_triton(monkeypatch):
    """A launcher target for every op that fails to import if anything ever tries to run it."""
    names = list(OPS) + ["mla_decode_plan", "mla_sparse_decode"]
    monkeypatch.setattr(_dispatch, "TRITON_LAUNCHERS", {n: BOGUS_LAUNCHER for n in names})
    every = frozenset({"sparse", "extra_k", "sink", "fp8_cache", "fp8_q", "rope_aware", "fp32", "fold_shared_index"})
    monkeypatch.setattr(_dispatch, "TRITON_FEATURES", {n: every for n in names})


@pytest.mark.parametrize("op", ALL_OPS)
def test_unknown_backend(op):
    check(op, lambda a: {"backend": "cuda"},
          says("Invalid backend", "expected one of ['auto', 'reference', 'triton']", "got 'cuda'"))


@pytest.mark.parametrize("op", ALL_OPS)
def test_triton_backend_without_kernel(op, monkeypatch):
    monkeypatch.setattr(_dispatch, "TRITON_LAUNCHERS", {})
    args = args_of(op, lambda a: {"backend": "triton"})
    with pytest.raises(NotImplementedError, match=says(f"pagedmla.{op}", "has no Triton kernel")):
        call(op, args)


@pytest.mark.parametrize("interpret", [None, "0"], ids=["unset", "zero"])
@pytest.mark.parametrize("op", ALL_OPS)
def test_triton_backend_on_cpu_without_interpreter(op, interpret, monkeypatch, bogus_triton):
    if interpret is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
    check(op, lambda a: {"backend": "triton"},
          says(f"Invalid backend for {op}", "expected CUDA tensors", "got tensors on cpu"))


@pytest.mark.parametrize("op", ALL_OPS)
def test_auto_backend_on_cpu_runs_the_reference(op, bogus_triton):
    call(op, args_of(op, backend="auto"))


def test_triton_backend_missing_feature(monkeypatch, bogus_triton):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(_dispatch.TRITON_FEATURES, "mla_sparse_decode", frozenset({"fp32"}))
    variant = "mla_decode_kv_cache_ragged[sparse]"
    args = args_of(variant, lambda a: {"backend": "triton", "extra_k": None, "extra_indices": None,
                                       "extra_topk_lengths": None})
    with pytest.raises(NotImplementedError, match=says("mla_sparse_decode", "does not support ['sink']")):
        call(variant, args)


def test_decode_reference_plan_with_triton_backend(monkeypatch, bogus_triton):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a = args_of("mla_decode_kv_cache_ragged")
    plan = pm.mla_decode_plan(a["input_row_offsets"], a["kv_collection"], num_heads=H, backend="reference")
    check("mla_decode_kv_cache_ragged", lambda a: {"plan": plan, "backend": "triton"},
          says("Invalid plan", "expected a plan built for backend 'triton'", "got 'reference'"))


# ---- cache writes ----

@pytest.mark.parametrize("override, match", [
    case(lambda a: {"hidden_state": "x"}, says("Invalid type of hidden_state", "got str"), "hidden-not-tensor"),
    case(lambda a: {"hidden_state": torch.randn(T, 1, K_IN)},
         says("Invalid rank of hidden_state", "expected 2", "got 3"), "hidden-rank"),
    case(lambda a: {"hidden_state": torch.ones(T, K_IN, dtype=I32)},
         says("Invalid dtype of hidden_state", "expected float32", "got int32"), "hidden-int"),
    case(lambda a: {"hidden_state": meta(a["hidden_state"])},
         says("Invalid device of hidden_state", "expected cpu", "got meta"), "hidden-meta"),
    case(lambda a: {"hidden_state": strided(a["hidden_state"])},
         says("Invalid layout of hidden_state", "unit stride", "got strides"), "hidden-strided"),
    case(lambda a: {"weight": torch.randn(HEAD + 1, K_IN)},
         says("Invalid shape of weight", f"expected ({HEAD}, {K_IN})", f"got ({HEAD + 1}, {K_IN})"), "weight-rows"),
    case(lambda a: {"weight": torch.randn(HEAD, K_IN + 1)},
         says("Invalid shape of weight", f"expected ({HEAD}, {K_IN})", f"got ({HEAD}, {K_IN + 1})"), "weight-k-in"),
    case(lambda a: {"weight": a["weight"].bfloat16()},
         says("Invalid dtype of weight", "expected float32", "got bfloat16"), "weight-dtype"),
    case(lambda a: {"weight": meta(a["weight"])}, says("Invalid device of weight", "expected cpu", "got meta"),
         "weight-meta"),
    case(lambda a: {"weight": strided(a["weight"])}, says("Invalid layout of weight", "unit stride"),
         "weight-strided"),
])
def test_k_matmul_ragged_paged(override, match):
    check("k_matmul_ragged_paged", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"weight": torch.randn(HEAD, K_IN)},
         says("Invalid shape of weight", f"expected ({2 * MHA_HEADS * MHA_HEAD}, {K_IN})", f"got ({HEAD}, {K_IN})"),
         "weight-rows"),
    case(lambda a: {"hidden_state": a["hidden_state"][:, :1]},
         says("Invalid shape of weight", f"expected ({2 * MHA_HEADS * MHA_HEAD}, 1)", f"got (64, {K_IN})"),
         "hidden-k-in"),
])
def test_kv_matmul_ragged_paged(override, match):
    check("kv_matmul_ragged_paged", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"rms_norm_cols": 0}, says("Invalid rms_norm_cols", "expected >= 1", "got 0"), "cols-0"),
    case(lambda a: {"rms_norm_cols": HEAD + 1, "gamma": torch.randn(HEAD + 1)},
         says("Invalid rms_norm_cols", f"expected <= {HEAD}", f"got {HEAD + 1}"), "cols-past-row"),
    case(lambda a: {"gamma": torch.randn(RANK - 1)},
         says("Invalid shape of gamma", f"expected ({RANK}", f"got ({RANK - 1},)"), "gamma-shape"),
    case(lambda a: {"gamma": torch.ones(RANK, dtype=I32)},
         says("Invalid dtype of gamma", "got int32"), "gamma-int"),
    case(lambda a: {"gamma": meta(a["gamma"])}, says("Invalid device of gamma", "expected cpu", "got meta"),
         "gamma-meta"),
    case(lambda a: {"eps": -1e-6}, says("Invalid eps", "expected >= 0", "got -1e-06"), "eps-negative"),
    case(lambda a: {"eps": "1e-6"}, says("Invalid eps", "expected a float", "got str"), "eps-str"),
    case(lambda a: {"eps": float("nan")}, says("Invalid eps", "got nan"), "eps-nan"),
    case(lambda a: {"kv_collection": a["kv_collection"].replace(max_seq_length=1)},
         says("max_seq_length", "got 1"), "understated-max_seq_length"),
])
def test_rms_norm_key_cache(override, match):
    check("rms_norm_key_cache", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"q_rope": torch.randn(T, ROPE)}, says("Invalid rank of q_rope", "expected 3", "got 2"),
         "q-rank"),
    case(lambda a: {"q_rope": torch.ones(T, H, ROPE, dtype=I32)}, says("Invalid dtype of q_rope", "got int32"),
         "q-int"),
    case(lambda a: {"q_rope": meta(a["q_rope"])}, says("Invalid device of q_rope", "expected cpu", "got meta"),
         "q-meta"),
    case(lambda a: {"q_rope": torch.randn(T, H, ROPE - 1), "freqs_cis": torch.randn(8, ROPE - 1)},
         says("Invalid shape of q_rope", f"even last dimension <= head_size {HEAD}", f"got ({T}, {H}, {ROPE - 1})"),
         "odd-rope-dim"),
    case(lambda a: {"q_rope": torch.randn(T, H, HEAD + 2), "freqs_cis": torch.randn(8, HEAD + 2)},
         says("Invalid shape of q_rope", f"<= head_size {HEAD}", f"got ({T}, {H}, {HEAD + 2})"), "rope-past-row"),
    case(lambda a: {"freqs_cis": torch.randn(8, ROPE // 2)},
         says("Invalid shape of freqs_cis", f"expected (*, {ROPE})", f"got (8, {ROPE // 2})"), "freqs-width"),
    case(lambda a: {"freqs_cis": torch.randn(5, ROPE)},
         says("Invalid shape of freqs_cis", "expected at least 6 positions", "got 5"), "freqs-too-few-positions"),
    case(lambda a: {"freqs_cis": torch.ones(8, ROPE, dtype=I32)}, says("Invalid dtype of freqs_cis", "got int32"),
         "freqs-int"),
    case(lambda a: {"freqs_cis": meta(a["freqs_cis"])},
         says("Invalid device of freqs_cis", "expected cpu", "got meta"), "freqs-meta"),
    case(lambda a: {"interleaved": 1}, says("Invalid interleaved", "expected a bool", "got int"),
         "interleaved-int"),
    case(lambda a: {"output": torch.empty(T, H, ROPE + 2)},
         says("Invalid shape of output", f"expected ({T}, {H}, {ROPE})", f"got ({T}, {H}, {ROPE + 2})"),
         "output-shape"),
    case(lambda a: {"output": torch.empty(T, H, ROPE, dtype=torch.bfloat16)},
         says("Invalid dtype of output", "expected float32", "got bfloat16"), "output-dtype"),
    case(lambda a: {"output": torch.empty(T, H, ROPE, device="meta")},
         says("Invalid device of output", "expected cpu", "got meta"), "output-meta"),
])
def test_fused_qk_rope_ragged(override, match):
    check("fused_qk_rope_ragged", override, match)


# ---- prefill ----

@pytest.mark.parametrize("override, match", [
    case(lambda a: {"buffer_size": 0}, says("Invalid buffer_size", "expected >= 1", "got 0"), "buffer-0"),
    case(lambda a: {"buffer_size": 16.0}, says("Invalid buffer_size", "expected an int", "got float"),
         "buffer-float"),
    case(lambda a: {"max_chunks": 0}, says("Invalid max_chunks", "expected >= 1", "got 0"), "max_chunks-0"),
    case(lambda a: {"buffer_size": 4},
         says("Invalid buffer_size", "needs 4 chunks of 4 rows", "expected at most max_chunks=2"),
         "max_chunks-exceeded"),
])
def test_mla_prefill_plan(override, match):
    check("mla_prefill_plan", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"buffer_row_offsets_1d": i32([0, 8, 16, 16])},
         says("Invalid shape of buffer_row_offsets_1d", f"expected ({B + 1}", f"got ({B + 2},)"), "bro-batch"),
    case(lambda a: {"buffer_row_offsets_1d": a["buffer_row_offsets_1d"].long()},
         says("Invalid dtype of buffer_row_offsets_1d", "expected int32", "got int64"), "bro-int64"),
    case(lambda a: {"buffer_row_offsets_1d": meta(a["buffer_row_offsets_1d"])},
         says("Invalid device of buffer_row_offsets_1d", "expected cpu", "got meta"), "bro-meta"),
    case(lambda a: {"buffer_row_offsets_1d": i32([4, 8, 16])},
         says("Invalid buffer_row_offsets_1d", "expected buffer_row_offsets_1d[0] == 0", "got 4"), "bro-not-from-0"),
    case(lambda a: {"buffer_row_offsets_1d": i32([0, 8, 4]), "buffer_length": 4},
         says("Invalid buffer_row_offsets_1d", "non-decreasing", "[1]=8 > buffer_row_offsets_1d[2]=4"),
         "bro-decreasing"),
    case(lambda a: {"cache_offsets_1d": i32([0, 0, 0])},
         says("Invalid shape of cache_offsets_1d", f"expected ({B}", f"got ({B + 1},)"), "co-batch"),
    case(lambda a: {"cache_offsets_1d": a["cache_offsets_1d"].long()},
         says("Invalid dtype of cache_offsets_1d", "expected int32", "got int64"), "co-int64"),
    case(lambda a: {"cache_offsets_1d": meta(a["cache_offsets_1d"])},
         says("Invalid device of cache_offsets_1d", "expected cpu", "got meta"), "co-meta"),
    case(lambda a: {"weight": a["weight"].unsqueeze(0)}, says("Invalid rank of weight", "expected 2", "got 3"),
         "weight-rank"),
    case(lambda a: {"weight": torch.ones(128, RANK, dtype=I32)}, says("Invalid dtype of weight", "got int32"),
         "weight-int"),
    case(lambda a: {"weight": strided(a["weight"])}, says("Invalid layout of weight", "unit stride"),
         "weight-strided"),
    case(lambda a: {"weight": torch.randn(128, HEAD + 1), "k_latent_buffer": torch.randn(BUF, HEAD + 1)},
         says("Invalid shape of weight", f"kv_lora_rank (dim 1) <= head_size {HEAD}", f"got (128, {HEAD + 1})"),
         "weight-rank-past-row"),
    case(lambda a: {"k_latent_buffer": torch.randn(BUF, RANK - 1)},
         says("Invalid shape of k_latent_buffer", f"expected (*, {RANK})", f"got ({BUF}, {RANK - 1})"),
         "latent-width"),
    case(lambda a: {"k_latent_buffer": a["k_latent_buffer"].bfloat16()},
         says("Invalid dtype of k_latent_buffer", "expected float32", "got bfloat16"), "latent-dtype"),
    case(lambda a: {"k_latent_buffer": strided(a["k_latent_buffer"])},
         says("Invalid layout of k_latent_buffer", "unit stride"), "latent-strided"),
    case(lambda a: {"k_buffer": torch.randn(BUF - 1, 128)},
         says("Invalid shape of k_buffer", f"expected ({BUF}, 128)", f"got ({BUF - 1}, 128)"), "kbuf-rows"),
    case(lambda a: {"k_buffer": torch.randn(BUF, 127)},
         says("Invalid shape of k_buffer", f"expected ({BUF}, 128)", f"got ({BUF}, 127)"), "kbuf-cols"),
    case(lambda a: {"k_buffer": a["k_buffer"].half()},
         says("Invalid dtype of k_buffer", "expected float32", "got float16"), "kbuf-dtype"),
    case(lambda a: {"k_buffer": meta(a["k_buffer"])}, says("Invalid device of k_buffer", "expected cpu", "got meta"),
         "kbuf-meta"),
    case(lambda a: {"buffer_length": BUF + 1},
         says("Invalid buffer_length", f"expected at most {BUF} (buffer rows)", f"got {BUF + 1}"),
         "length-past-buffer"),
    case(lambda a: {"buffer_length": -2}, says("Invalid buffer_length", "expected >= -1", "got -2"),
         "length-below-minus-1"),
    case(lambda a: {"buffer_length": 16.0}, says("Invalid buffer_length", "expected an int", "got float"),
         "length-float"),
    case(lambda a: {"buffer_length": i32([8, 8])},
         says("Invalid shape of buffer_length", "expected a scalar", "got (2,)"), "length-tensor-shape"),
    case(lambda a: {"buffer_length": torch.tensor(15.5)}, says("buffer_length", "float"), "length-float-tensor"),
    case(lambda a: {"buffer_row_offsets_1d": i32([0, 4, 8]), "buffer_length": 12},
         says("buffer_length", "8", "got 12"), "length-past-bro-end"),
    case(lambda a: {"cache_offsets_1d": i32([-4, 0])}, says("cache_offsets_1d", "got -4"), "co-negative"),
    case(lambda a: {"cache_offsets_1d": i32([8, 0])}, says("cache_offsets_1d", "8"), "co-past-pages"),
])
def test_mla_decompress_k_cache_ragged_paged(override, match):
    check("mla_decompress_k_cache_ragged_paged", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"q": torch.randn(T, NOPE + ROPE)}, says("Invalid rank of q", "expected 3", "got 2"), "q-rank"),
    case(lambda a: {"q": a["q"].to(FP8)}, says("Invalid dtype of q", "got float8_e4m3fn"), "q-fp8"),
    case(lambda a: {"q": meta(a["q"])}, says("Invalid device of q", "expected cpu", "got meta"), "q-meta"),
    case(lambda a: {"q": strided(a["q"])}, says("Invalid layout of q", "unit stride"), "q-strided"),
    case(lambda a: {"k": torch.randn(BUF, H + 1, NOPE)},
         says("Invalid shape of k", f"expected (*, {H}, *)", f"got ({BUF}, {H + 1}, {NOPE})"), "k-heads"),
    case(lambda a: {"k": a["k"].bfloat16()}, says("Invalid dtype of k", "expected float32", "got bfloat16"),
         "k-dtype"),
    case(lambda a: {"k": strided(a["k"])}, says("Invalid layout of k", "unit stride"), "k-strided"),
    case(lambda a: {"k": meta(a["k"])}, says("Invalid device of k", "expected cpu", "got meta"), "k-meta"),
    case(lambda a: {"v": torch.randn(BUF - 1, H, VDIM)},
         says("Invalid shape of v", f"expected ({BUF}, {H}, *)", f"got ({BUF - 1}, {H}, {VDIM})"), "v-rows"),
    case(lambda a: {"v": torch.randn(BUF, H + 1, VDIM)},
         says("Invalid shape of v", f"expected ({BUF}, {H}, *)", f"got ({BUF}, {H + 1}, {VDIM})"), "v-heads"),
    case(lambda a: {"v": a["v"].half()}, says("Invalid dtype of v", "expected float32", "got float16"), "v-dtype"),
    case(lambda a: {"k": torch.randn(BUF, H, NOPE + ROPE + 1)},
         says("Invalid shape of q", f"k head size ({NOPE + ROPE + 1})", f"got {NOPE + ROPE}"), "k-wider-than-q"),
    case(lambda a: {"q": torch.randn(T, H, NOPE + HEAD + 1)},
         says("Invalid shape of q", f"(0..{HEAD})", f"got {NOPE + HEAD + 1}"), "rope-past-row"),
    case(lambda a: {"buffer_row_offsets": i32([0, 16])},
         says("Invalid shape of buffer_row_offsets", f"expected ({B + 1}", "got (2,)"), "bro-batch"),
    case(lambda a: {"buffer_row_offsets": i32([0, 8, 16]).long()},
         says("Invalid dtype of buffer_row_offsets", "expected int32", "got int64"), "bro-int64"),
    case(lambda a: {"buffer_row_offsets": i32([2, 8, 16])},
         says("Invalid buffer_row_offsets", "expected buffer_row_offsets[0] == 0", "got 2"), "bro-not-from-0"),
    case(lambda a: {"buffer_row_offsets": i32([0, 9, 8])},
         says("Invalid buffer_row_offsets", "non-decreasing", "got buffer_row_offsets[1]=9 > buffer_row_offsets[2]=8"),
         "bro-decreasing"),
    case(lambda a: {"buffer_row_offsets": i32([0, 8, BUF + 4])},
         says("Invalid buffer_row_offsets", f"buffer_row_offsets[-1] <= {BUF} (rows of k)", f"got {BUF + 4}"),
         "bro-past-k-rows"),
    case(lambda a: {"cache_offsets": i32([0])},
         says("Invalid shape of cache_offsets", f"expected ({B}", "got (1,)"), "co-batch"),
    case(lambda a: {"cache_offsets": i32([0, 0]).long()},
         says("Invalid dtype of cache_offsets", "expected int32", "got int64"), "co-int64"),
    case(lambda a: {"cache_offsets": meta(a["cache_offsets"])},
         says("Invalid device of cache_offsets", "expected cpu", "got meta"), "co-meta"),
    case(lambda a: {"output": torch.empty(T, H, NOPE + ROPE)},
         says("Invalid shape of output", f"expected ({T}, {H}, {VDIM})", f"got ({T}, {H}, {NOPE + ROPE})"),
         "output-shape"),
    case(lambda a: {"output": torch.empty(T, H, VDIM, dtype=torch.bfloat16)},
         says("Invalid dtype of output", "expected float32", "got bfloat16"), "output-dtype"),
    case(lambda a: {"output": torch.empty(T, H, VDIM, device="meta")},
         says("Invalid device of output", "expected cpu", "got meta"), "output-meta"),
    case(lambda a: {"return_lse": "no"}, says("Invalid return_lse", "expected a bool", "got str"), "return_lse-str"),
    case(lambda a: {"cache_offsets": i32([-4, 0])}, says("cache_offsets", "got -4"), "co-negative"),
])
def test_mla_prefill_kv_cache_ragged(override, match):
    check("mla_prefill_kv_cache_ragged", override, match)


@pytest.mark.parametrize("override, match", [
    case(lambda a: {"q": torch.randn(T, NOPE + ROPE)}, says("Invalid rank of q", "expected 3", "got 2"), "q-rank"),
    case(lambda a: {"q": torch.ones(T, H, NOPE + ROPE, dtype=I32)}, says("Invalid dtype of q", "got int32"),
         "q-int"),
    case(lambda a: {"q": meta(a["q"])}, says("Invalid device of q", "expected cpu", "got meta"), "q-meta"),
    case(lambda a: {"q": strided(a["q"])}, says("Invalid layout of q", "unit stride"), "q-strided"),
    case(lambda a: {"kv_b_proj_weight": torch.randn(128)},
         says("Invalid rank of kv_b_proj_weight", "expected 2", "got 1"), "weight-rank"),
    case(lambda a: {"kv_b_proj_weight": a["kv_b_proj_weight"].bfloat16()},
         says("Invalid dtype of kv_b_proj_weight", "expected float32", "got bfloat16"), "weight-dtype"),
    case(lambda a: {"kv_b_proj_weight": meta(a["kv_b_proj_weight"])},
         says("Invalid device of kv_b_proj_weight", "expected cpu", "got meta"), "weight-meta"),
    case(lambda a: {"kv_b_proj_weight": strided(a["kv_b_proj_weight"])},
         says("Invalid layout of kv_b_proj_weight", "unit stride"), "weight-strided"),
    case(lambda a: {"kv_b_proj_weight": torch.randn(127, RANK)},
         says("Invalid shape of kv_b_proj_weight", f"multiple of num_heads={H}", f"got (127, {RANK})"),
         "weight-not-per-head"),
    case(lambda a: {"q": torch.randn(T, H, ROPE)},
         says("Invalid shape of q", f"rope dim {ROPE}", f"got {ROPE}"), "q-no-nope"),
    case(lambda a: {"q": torch.randn(T, H, NOPE + VDIM + ROPE)},
         says("Invalid shape of q", f"nope < {NOPE + VDIM}", f"got {NOPE + VDIM + ROPE}"), "q-no-v"),
    case(lambda a: {"buffer_size": 0}, says("Invalid buffer_size", "expected >= 1", "got 0"), "buffer-0"),
    case(lambda a: {"kv_b_proj_weight": torch.randn(H * 200, HEAD + 20)},
         says("Invalid shape of kv_b_proj_weight", f"head_size {HEAD}", f"got ({H * 200}, {HEAD + 20})"),
         "weight-rank-past-row"),
    case(lambda a: {"return_lse": 1}, says("Invalid return_lse", "expected a bool", "got int"), "return_lse-int"),
])
def test_mla_prefill(override, match):
    check("mla_prefill", override, match)


def test_mla_prefill_checks_scale_without_chunks():
    pb = make_paged_batch([0], [0], head_size=HEAD, page_size=PS, num_layers=LAYERS)
    with pytest.raises(ValueError, match=says("Invalid scale", "expected a float", "got str")):
        pm.mla_prefill(torch.randn(0, H, NOPE + ROPE), pb.input_row_offsets, pb.kv, 0,
                       torch.randn(H * (NOPE + VDIM), RANK), "x", backend="reference")


@pytest.mark.parametrize("op", ["mla_prefill_kv_cache_ragged", "mla_prefill"])
def test_prefill_on_rope_aware_cache(op):
    check(op, lambda a: {"kv_collection": pm.quantize_kv_cache(a["kv_collection"], rope_aware=True,
                                                               qk_rope_head_dim=ROPE)},
          says("Invalid kv_collection", "expected a cache with plain rows for prefill", "got the rope-aware"))


@pytest.mark.parametrize("op", ["mla_prefill_kv_cache_ragged", "mla_prefill"])
def test_prefill_without_rope_columns(op):
    if op == "mla_prefill":
        override = lambda a: {"q": torch.randn(T, H, NOPE), "kv_b_proj_weight": torch.randn(H * (NOPE + VDIM), HEAD)}
    else:
        override = lambda a: {"q": torch.randn(T, H, NOPE)}
    out = call(op, args_of(op, override))
    assert out.shape == (T, H, VDIM) and bool(out.isfinite().all())


# ---- decode ----

@pytest.mark.parametrize("override, match", [
    case(lambda a: {"num_heads": 0}, says("Invalid num_heads", "expected >= 1", "got 0"), "num_heads-0"),
    case(lambda a: {"num_heads": "2"}, says("Invalid num_heads", "expected an int", "got str"), "num_heads-str"),
    case(lambda a: {"num_partitions": 0}, says("Invalid num_partitions", "expected >= 1", "got 0"), "partitions-0"),
    case(lambda a: {"kv_collection": a["kv_collection"].replace(max_seq_length=1)},
         says("max_seq_length", "got 1"), "understated-max_seq_length"),
    case(lambda a: {"kv_collection": a["kv_collection"].replace(max_cache_length=2)},
         says("max_cache_length", "got 2"), "understated-max_cache_length"),
    case(lambda a: {"out": pm.mla_decode_plan(a["input_row_offsets"], a["kv_collection"], num_heads=H + 1,
                                              backend="reference")},
         says("Invalid out", f"num_heads={H}", f"got one for {H + 1}"), "refill-other-heads"),
])
def test_mla_decode_plan(override, match):
    check("mla_decode_plan", override, match)


def _differing_rows(a):
    idx = a["indices"].clone()
    idx[1, 0] = idx[1, 1]
    return {"indices": idx, "fold_shared_index": True}


def _bad_index(name, value):
    def override(a):
        idx = a[name].clone()
        idx[0, 0] = value
        return {name: idx}
    return override


DECODE = "mla_decode_kv_cache_ragged"
DECODE_CASES = [
    # (variant, override, match, id, marks...)
    *[(DECODE, (lambda a, f=f: {f: 1}), says(f"Invalid {f}", "expected a bool", "got int"), f"{f}-int")
      for f in ("return_lse", "per_token_scale_rope_aware", "fold_shared_index")],
    (DECODE, lambda a: {"qk_rope_head_dim": 0}, says("Invalid qk_rope_head_dim", "expected >= 1", "got 0"),
     "rope-dim-0"),
    (DECODE, lambda a: {"qk_rope_head_dim": HEAD}, says("Invalid qk_rope_head_dim", f"<= {HEAD - 1}", f"got {HEAD}"),
     "rope-dim-whole-row"),
    (DECODE, lambda a: {"q": torch.randn(T, HEAD)}, says("Invalid rank of q", "expected 3", "got 2"), "q-rank"),
    (DECODE, lambda a: {"q": torch.ones(T, H, HEAD, dtype=I32)},
     says("Invalid dtype of q", "float8_e4m3fn", "got int32"), "q-int"),
    (DECODE, lambda a: {"q": meta(a["q"])}, says("Invalid device of q", "expected cpu", "got meta"), "q-meta"),
    (DECODE, lambda a: {"q": strided(a["q"])}, says("Invalid layout of q", "unit stride"), "q-strided"),
    (DECODE, lambda a: {"q": torch.randn(T, H, HEAD + 1)},
     says("Invalid shape of q", f"expected last dimension {HEAD}", f"got ({T}, {H}, {HEAD + 1})"), "q-last-dim"),
    (DECODE, lambda a: {"q_scale": torch.ones(T)},
     says("Invalid q_scale", "expected None for a torch.float32 q", "got a tensor"), "q_scale-non-fp8-q"),
    (DECODE, lambda a: {"output": torch.empty(T, H, HEAD)},
     says("Invalid shape of output", f"expected ({T}, {H}, {RANK})", f"got ({T}, {H}, {HEAD})"), "output-shape"),
    (DECODE, lambda a: {"output": torch.empty(T, H, RANK, dtype=torch.bfloat16)},
     says("Invalid dtype of output", "expected float32", "got bfloat16"), "output-dtype"),
    (DECODE, lambda a: {"output": strided(torch.empty(T, H, RANK))}, says("Invalid layout of output", "unit stride"),
     "output-strided"),
    (DECODE, lambda a: {"output": torch.empty(T, H, RANK, device="meta")},
     says("Invalid device of output", "expected cpu", "got meta"), "output-meta"),
    (DECODE, lambda a: {"plan": {"num_partitions": 1}},
     says("Invalid type of plan", "expected DecodePlan", "got dict"), "plan-type"),
    (DECODE, lambda a: {"plan": pm.mla_decode_plan(i32([0, 1]), make_paged_batch(
        [1], [1], head_size=HEAD, page_size=PS).kv, num_heads=H, backend="reference")},
     says("Invalid plan", f"batch size {B}", "got one for 1"), "plan-batch"),
    (DECODE, lambda a: {"plan": pm.mla_decode_plan(a["input_row_offsets"], a["kv_collection"], num_heads=H + 1,
                                                   backend="reference")},
     says("Invalid plan", f"num_heads={H} (q's heads)", f"got one for {H + 1}"), "plan-heads"),
    (DECODE, lambda a: {"plan": dataclasses.replace(pm.mla_decode_plan(
        a["input_row_offsets"], a["kv_collection"], num_heads=H, backend="reference"), num_heads=0)},
     says("Invalid plan", f"num_heads={H}", "got a plan without one"), "plan-without-heads"),
    (DECODE, lambda a: {"num_partitions": 0}, says("Invalid num_partitions", "expected >= 1", "got 0"),
     "partitions-0"),
    (DECODE, lambda a: {"num_partitions": 0, "plan": pm.mla_decode_plan(
        a["input_row_offsets"], a["kv_collection"], num_heads=H, backend="reference")},
     says("Invalid num_partitions", "expected >= 1", "got 0"), "partitions-0-with-plan"),
    (DECODE, lambda a: {"per_token_scale_rope_aware": True},
     says("Invalid per_token_scale_rope_aware", "expected False (the cache's layout", "got True"),
     "rope-aware-flag-on-plain-cache"),
    (DECODE, lambda a: {"per_token_scale_rope_aware": True, "kv_collection": fp8_cache(a["kv_collection"])},
     says("Invalid per_token_scale_rope_aware", "expected False (the cache's layout", "got True"),
     "rope-aware-flag-on-grouped-fp8-cache"),
    # Dense decode with sparse-only arguments.
    (DECODE, lambda a: {"topk_lengths": i32([1, 1])}, says("Invalid indices", "with topk_lengths", "got None"),
     "topk_lengths-without-indices"),
    (DECODE, lambda a: {"extra_k": mla_batch().kv}, says("Invalid indices", "extra_k", "got None"),
     "extra_k-without-indices"),
    (DECODE, lambda a: {"fold_shared_index": True}, says("Invalid indices", "fold_shared_index", "got None"),
     "fold-without-indices"),
    # FP8 q.
    ("[fp8_q]", lambda a: {"q_scale": None}, says("Invalid q_scale", "expected float32 [T] for an FP8 q", "got None"),
     "fp8-q-without-q_scale"),
    ("[fp8_q]", lambda a: {"q_scale": torch.ones(T + 1)},
     says("Invalid shape of q_scale", f"expected ({T}", f"got ({T + 1},)"), "q_scale-shape"),
    ("[fp8_q]", lambda a: {"q_scale": torch.ones(T, dtype=torch.bfloat16)},
     says("Invalid dtype of q_scale", "expected float32", "got bfloat16"), "q_scale-dtype"),
    ("[fp8_q]", lambda a: {"q_scale": torch.ones(T, device="meta")},
     says("Invalid device of q_scale", "expected cpu", "got meta"), "q_scale-meta"),
    ("[fp8_q]", lambda a: {"output": torch.empty(T, H, RANK)},
     says("Invalid dtype of output", "expected bfloat16", "got float32"), "fp8-q-output-not-bf16"),
    # Rope-aware FP8 rows: the cache row is 64 + 2 * 16 = 96 bytes.
    ("[rope_aware]", lambda a: {"q": torch.randn(T, H, 96, dtype=torch.bfloat16)},
     says("Invalid shape of q", f"expected last dimension {RANK + ROPE}", f"got ({T}, {H}, 96)"),
     "rope-aware-bf16-q-width"),
    ("[rope_aware]", lambda a: {"q": a["q"].to(FP8), "q_scale": torch.ones(T)},
     says("Invalid shape of q", "expected last dimension 96", f"got ({T}, {H}, {RANK + ROPE})"),
     "rope-aware-fp8-q-width"),
    ("[rope_aware]", lambda a: {"per_token_scale_rope_aware": False},
     says("Invalid per_token_scale_rope_aware", "expected True (the cache's layout", "got False"),
     "rope-aware-cache-without-flag"),
    ("[rope_aware]", lambda a: {"qk_rope_head_dim": 48},
     says("Invalid qk_rope_head_dim", "2 * qk_rope_head_dim < head_size 96", "got 48"), "rope-aware-rope-too-wide"),
    # Sparse.
    ("[sparse]", lambda a: {"mask": "causal"},
     says("Invalid mask", "expected 'null' for sparse decode", "got 'causal'"), "sparse-with-mask"),
    ("[sparse]", lambda a: {"indices": torch.zeros(T + 1, TOPK, dtype=I32)},
     says("Invalid shape of indices", f"expected ({T}, *)", f"got ({T + 1}, {TOPK})"), "indices-rows"),
    ("[sparse]", lambda a: {"indices": a["indices"].long()},
     says("Invalid dtype of indices", "expected int32", "got int64"), "indices-int64"),
    ("[sparse]", lambda a: {"indices": meta(a["indices"])},
     says("Invalid device of indices", "expected cpu", "got meta"), "indices-meta"),
    ("[sparse]", lambda a: {"topk_lengths": None},
     says("Invalid topk_lengths", f"expected int32 [{B}] with indices", "got None"), "indices-without-topk_lengths"),
    ("[sparse]", lambda a: {"topk_lengths": i32([1, 1, 1])},
     says("Invalid shape of topk_lengths", f"expected ({B}", f"got ({B + 1},)"), "topk_lengths-batch"),
    ("[sparse]", lambda a: {"topk_lengths": a["topk_lengths"].long()},
     says("Invalid dtype of topk_lengths", "expected int32", "got int64"), "topk_lengths-int64"),
    ("[sparse]", lambda a: {"topk_lengths": i32([TOPK + 1, 1])},
     says("Invalid topk_lengths", f"expected values in [0, {TOPK}] (columns of indices)", f"got [1, {TOPK + 1}]"),
     "topk_lengths-past-topk"),
    ("[sparse]", lambda a: {"topk_lengths": i32([-1, 1])},
     says("Invalid topk_lengths", f"expected values in [0, {TOPK}]", "got [-1, 1]"), "topk_lengths-negative"),
    ("[sparse]", _differing_rows,
     says("Invalid fold_shared_index=True", "share one indices row", "different rows in sequence 0"),
     "fold-with-differing-rows"),
    ("[sparse]", _bad_index("indices", NUM_BLOCKS * PS), says("indices", str(NUM_BLOCKS * PS)),
     "indices-past-pool"),
    ("[sparse]", _bad_index("indices", -2), says("indices", "-2"), "indices-below-minus-1"),
    ("[sparse]", _bad_index("extra_indices", 4 * PS), says("extra_indices", str(4 * PS)), "extra-indices-past-pool"),
    ("[sparse]", lambda a: {"extra_k": "cache"},
     says("Invalid type of extra_k", "expected PagedKVCacheCollection", "got str"), "extra_k-type"),
    ("[sparse]", lambda a: {"extra_k": mha_batch().kv},
     says("Invalid extra_k", "expected an MLA cache", "got is_mla=False"), "extra_k-mha"),
    ("[sparse]", lambda a: {"extra_k": make_paged_batch([4], [0], head_size=96, page_size=PS, num_layers=LAYERS).kv},
     says("Invalid extra_k", "expected (head_size, dtype, per_token_scale_rope_aware)",
          f"({HEAD}, torch.float32, False)", "got (96, torch.float32, False)"),
     "extra_k-head_size"),
    ("[sparse]", lambda a: {"extra_k": make_paged_batch([4], [0], head_size=HEAD, page_size=PS, num_layers=LAYERS,
                                                        dtype=torch.bfloat16).kv},
     says("Invalid extra_k", f"({HEAD}, torch.float32, False)", f"got ({HEAD}, torch.bfloat16, False)"),
     "extra_k-dtype"),
    ("[sparse]", lambda a: {"extra_k": meta_collection(a["extra_k"])},
     says("Invalid device of extra_k", "expected cpu", "got meta"), "extra_k-meta"),
    ("[sparse]", lambda a: {"extra_k": make_paged_batch([4], [0], head_size=HEAD, page_size=PS, num_layers=1).kv},
     says("extra_k", "layer", "got 1"), "extra_k-fewer-layers"),
    ("[sparse]", lambda a: {"extra_indices": None},
     says("Invalid extra_indices", "with extra_k", "got None"), "extra_k-without-extra_indices"),
    ("[sparse]", lambda a: {"extra_indices": torch.zeros(T - 1, EXTRA_TOPK, dtype=I32)},
     says("Invalid shape of extra_indices", f"expected ({T}, *)", f"got ({T - 1}, {EXTRA_TOPK})"),
     "extra_indices-rows"),
    ("[sparse]", lambda a: {"extra_topk_lengths": None},
     says("Invalid extra_topk_lengths", f"expected int32 [{B}] with extra_indices", "got None"),
     "extra_indices-without-lengths"),
    ("[sparse]", lambda a: {"extra_topk_lengths": i32([EXTRA_TOPK + 1, 0])},
     says("Invalid extra_topk_lengths", f"expected values in [0, {EXTRA_TOPK}] (columns of extra_indices)",
          f"got [0, {EXTRA_TOPK + 1}]"), "extra_topk_lengths-past-topk"),
    ("[sparse]", lambda a: {"extra_k": None},
     says("Invalid extra_k", "with extra_indices", "got None"), "extra_indices-without-extra_k"),
    ("[sparse]", lambda a: {"extra_k": None, "extra_indices": None},
     says("Invalid extra_k", "got None"), "extra_topk_lengths-without-extra_k"),
    ("[sparse]", lambda a: {"attn_sink": torch.randn(H + 1)},
     says("Invalid shape of attn_sink", f"expected ({H}", f"got ({H + 1},)"), "sink-shape"),
    ("[sparse]", lambda a: {"attn_sink": a["attn_sink"].bfloat16()},
     says("Invalid dtype of attn_sink", "expected float32", "got bfloat16"), "sink-dtype"),
    ("[sparse]", lambda a: {"attn_sink": meta(a["attn_sink"])},
     says("Invalid device of attn_sink", "expected cpu", "got meta"), "sink-meta"),
]


@pytest.mark.parametrize("variant, override, match", [
    pytest.param(DECODE + v if v.startswith("[") else v, o, m, id=i, marks=marks)
    for v, o, m, i, *marks in DECODE_CASES
])
def test_mla_decode_kv_cache_ragged(variant, override, match):
    check(variant, override, match)


def test_plan_heads_bind_dense_decode_only():
    """Both plan builders record the heads a plan was built for; a sparse call, which ignores the plan's
    schedule, ignores its heads too (same answer as without a plan)."""
    a = _decode_sparse()
    for backend in ("reference", "triton"):
        plan = pm.mla_decode_plan(a["input_row_offsets"], a["kv_collection"], num_heads=H + 1, backend=backend)
        assert plan.num_heads == H + 1
    want = pm.mla_decode_kv_cache_ragged(**a, backend="reference")
    got = pm.mla_decode_kv_cache_ragged(**a, plan=plan, backend="reference")
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_shape_messages_write_one_dimension_as_python_does():
    """A 1-D shape is written `(3,)` on both sides of the message (it was "expected (3), got (4,)")."""
    from pagedmla._checks import check_tensor
    with pytest.raises(ValueError, match=r"Invalid shape of x: expected \(3,\), got \(4,\)$"):
        check_tensor("x", torch.zeros(4), shape=(3,))
    with pytest.raises(ValueError, match=r"Invalid shape of x: expected \(\*, 3\), got \(2, 4\)$"):
        check_tensor("x", torch.zeros(2, 4), shape=(None, 3))
