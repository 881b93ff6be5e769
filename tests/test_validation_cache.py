"""The error contract of the cache classes: KVCacheParams, PagedKVCacheCollection, quantize_kv_cache,
row_offsets and PagedKVCacheManager (every bad input a ValueError naming the argument; pool exhaustion an
OutOfPagesError that changes nothing). Baselines and helpers are shared with test_validation.py."""

from __future__ import annotations

import pytest
import torch

import pagedmla as pm
from test_validation import (
    FP8,
    HEAD,
    LAYERS,
    NUM_BLOCKS,
    PS,
    TABLE_WIDTH,
    B,
    case,
    fp8_cache,
    i32,
    meta,
    mha_batch,
    mla_batch,
    says,
    strided,
)

# ---- KVCacheParams, PagedKVCacheCollection, quantize_kv_cache, row_offsets ----

PARAMS = {"num_heads": 1, "head_size": HEAD, "is_mla": True, "page_size": PS, "num_layers": LAYERS,
          "dtype": torch.float32}


@pytest.mark.parametrize("changes, match", [
    case({"num_heads": 0, "is_mla": False}, says("Invalid num_heads", "expected >= 1", "got 0"), "num_heads-0"),
    case({"head_size": 0}, says("Invalid head_size", "expected >= 1", "got 0"), "head_size-0"),
    case({"page_size": 0}, says("Invalid page_size", "expected >= 1", "got 0"), "page_size-0"),
    case({"page_size": 4.0}, says("Invalid page_size", "expected an int", "got float"), "page_size-float"),
    case({"page_size": True}, says("Invalid page_size", "expected an int", "got bool"), "page_size-bool"),
    case({"num_layers": 0}, says("Invalid num_layers", "expected >= 1", "got 0"), "num_layers-0"),
    case({"is_mla": 1}, says("Invalid is_mla", "expected a bool", "got int"), "is_mla-int"),
    case({"num_heads": 2}, says("Invalid num_heads", "expected 1 for an MLA cache", "got 2"), "mla-two-heads"),
    case({"dtype": torch.int8}, says("Invalid dtype", "float8_e4m3fn", "got torch.int8"), "dtype-int8"),
    case({"dtype": FP8}, says("Invalid quantization_granularity", "expected an int", "got NoneType"),
         "fp8-without-granularity"),
    case({"dtype": FP8, "quantization_granularity": 0},
         says("Invalid quantization_granularity", "expected >= 1", "got 0"), "granularity-0"),
    case({"dtype": FP8, "quantization_granularity": HEAD + 1},
         says("Invalid quantization_granularity", f"expected <= {HEAD}", f"got {HEAD + 1}"), "granularity-past-row"),
    case({"quantization_granularity": 16},
         says("Invalid quantization_granularity", "expected None for a torch.float32 cache", "got 16"),
         "granularity-non-fp8"),
    case({"per_token_scale_rope_aware": True},
         says("Invalid per_token_scale_rope_aware", "expected an FP8 cache with one scale per row",
              "got dtype torch.float32 and granularity None"), "rope-aware-non-fp8"),
    case({"per_token_scale_rope_aware": True, "dtype": FP8, "quantization_granularity": 16},
         says("Invalid per_token_scale_rope_aware", f"quantization_granularity == head_size {HEAD}",
              "got dtype torch.float8_e4m3fn and granularity 16"), "rope-aware-grouped-scales"),
    case({"per_token_scale_rope_aware": 1, "dtype": FP8, "quantization_granularity": HEAD},
         says("Invalid per_token_scale_rope_aware", "expected a bool", "got int"), "rope-aware-int"),
])
def test_kv_cache_params(changes, match):
    with pytest.raises(ValueError, match=match):
        pm.KVCacheParams(**{**PARAMS, **changes})


def _collection_args():
    kv = mla_batch().kv
    return {"blocks": kv.blocks, "cache_lengths": kv.cache_lengths, "lookup_table": kv.lookup_table,
            "params": kv.params}


def _fp8_collection_args():
    kv = fp8_cache(mla_batch().kv)
    return {"blocks": kv.blocks, "cache_lengths": kv.cache_lengths, "lookup_table": kv.lookup_table,
            "params": kv.params,
                "scales": kv.scales}


BLOCKS_SHAPE = (NUM_BLOCKS, 1, LAYERS, PS, 1, HEAD)
SCALES_SHAPE = (NUM_BLOCKS, 1, LAYERS, PS, 1, HEAD // 16)


@pytest.mark.parametrize("fp8, override, match", [
    pytest.param(False, lambda a: {"params": dict(PARAMS)},
                 says("Invalid type of params", "expected KVCacheParams", "got dict"), id="params-type"),
    pytest.param(False, lambda a: {"blocks": a["blocks"].tolist()},
                 says("Invalid type of blocks", "expected a torch.Tensor", "got list"), id="blocks-type"),
    pytest.param(False, lambda a: {"blocks": a["blocks"][:, 0]},
                 says("Invalid rank of blocks", "expected 6", "got 5"), id="blocks-rank"),
    pytest.param(False, lambda a: {"blocks": torch.zeros(NUM_BLOCKS, 1, LAYERS, 2 * PS, 1, HEAD)},
                 says("Invalid shape of blocks", f"expected {BLOCKS_SHAPE}", f"got (7, 1, 2, {2 * PS}, 1, 80)"),
                 id="blocks-page_size"),
    pytest.param(False, lambda a: {"blocks": torch.zeros(NUM_BLOCKS, 2, LAYERS, PS, 1, HEAD)},
                 says("Invalid shape of blocks", f"expected {BLOCKS_SHAPE}", "got (7, 2, 2, 4, 1, 80)"),
                 id="blocks-kv_dim"),
    pytest.param(False, lambda a: {"blocks": a["blocks"].bfloat16()},
                 says("Invalid dtype of blocks", "expected float32", "got bfloat16"), id="blocks-dtype"),
    pytest.param(False, lambda a: {"blocks": strided(a["blocks"])},
                 says("Invalid layout of blocks", "unit stride in head_size", "got strides"), id="blocks-strided"),
    pytest.param(False, lambda a: {"cache_lengths": a["cache_lengths"].view(1, B)},
                 says("Invalid rank of cache_lengths", "expected 1", "got 2"), id="cache_lengths-rank"),
    pytest.param(False, lambda a: {"cache_lengths": a["cache_lengths"].long()},
                 says("Invalid dtype of cache_lengths", "expected int32", "got int64"), id="cache_lengths-int64"),
    pytest.param(False, lambda a: {"cache_lengths": meta(a["cache_lengths"])},
                 says("Invalid device of cache_lengths", "expected cpu", "got meta"), id="cache_lengths-meta"),
    pytest.param(False, lambda a: {"cache_lengths": i32([3, -1])},
                 says("Invalid cache_lengths", "expected values >= 0", "got min -1"), id="cache_lengths-negative"),
    pytest.param(False, lambda a: {"lookup_table": a["lookup_table"][:1]},
                 says("Invalid shape of lookup_table", f"expected ({B}, *)", f"got (1, {TABLE_WIDTH})"),
                 id="lookup_table-batch"),
    pytest.param(False, lambda a: {"lookup_table": a["lookup_table"][0]},
                 says("Invalid rank of lookup_table", "expected 2", "got 1"), id="lookup_table-rank"),
    pytest.param(False, lambda a: {"lookup_table": a["lookup_table"].long()},
                 says("Invalid dtype of lookup_table", "expected int32", "got int64"), id="lookup_table-int64"),
    pytest.param(False, lambda a: {"lookup_table": meta(a["lookup_table"])},
                 says("Invalid device of lookup_table", "expected cpu", "got meta"), id="lookup_table-meta"),
    pytest.param(False, lambda a: {"scales": torch.ones(SCALES_SHAPE)},
                 says("Invalid scales", "expected None for a torch.float32 cache", "got a tensor"),
                 id="scales-non-fp8"),
    pytest.param(False, lambda a: {"max_seq_length": -1}, says("Invalid max_seq_length", "expected >= 0", "got -1"),
                 id="max_seq_length-negative"),
    pytest.param(False, lambda a: {"max_cache_length": "6"},
                 says("Invalid max_cache_length", "expected an int", "got str"), id="max_cache_length-str"),
    pytest.param(True, lambda a: {"scales": None},
                 says("Invalid scales", "expected a float32 tensor for an FP8 cache", "got None"),
                 id="fp8-without-scales"),
    pytest.param(True, lambda a: {"scales": torch.ones(NUM_BLOCKS, 1, LAYERS, PS, 1, 1)},
                 says("Invalid shape of scales", f"expected {SCALES_SHAPE}", "got (7, 1, 2, 4, 1, 1)"),
                 id="scales-shape"),
    pytest.param(True, lambda a: {"scales": a["scales"].bfloat16()},
                 says("Invalid dtype of scales", "expected float32", "got bfloat16"), id="scales-dtype"),
    pytest.param(True, lambda a: {"scales": meta(a["scales"])},
                 says("Invalid device of scales", "expected cpu", "got meta"), id="scales-meta"),
])
def test_paged_kv_cache_collection(fp8, override, match):
    args = _fp8_collection_args() if fp8 else _collection_args()
    args.update(override(args))
    with pytest.raises(ValueError, match=match):
        pm.PagedKVCacheCollection(**args)


def test_collection_replace_revalidates():
    kv = mla_batch().kv
    with pytest.raises(ValueError, match=says("Invalid shape of lookup_table", f"expected ({B}, *)", "got (1, ")):
        kv.replace(lookup_table=kv.lookup_table[:1])


@pytest.mark.parametrize("accessor, layer, match", [
    pytest.param("key_cache", LAYERS, says("Invalid layer_idx", f"expected <= {LAYERS - 1}", f"got {LAYERS}"),
                 id="key_cache-layer"),
    pytest.param("key_cache", -1, says("Invalid layer_idx", "expected >= 0", "got -1"), id="key_cache-negative"),
    pytest.param("key_scales", LAYERS, says("Invalid layer_idx", f"got {LAYERS}"), id="key_scales-layer"),
    pytest.param("value_cache", 0, says("value_cache", "expected an MHA cache", "got is_mla=True"),
                 id="value_cache-on-mla"),
])
def test_collection_accessors(accessor, layer, match):
    kv = fp8_cache(mla_batch().kv)
    with pytest.raises(ValueError, match=match):
        getattr(kv, accessor)(layer)


def test_value_cache_layer_on_mha():
    with pytest.raises(ValueError, match=says("Invalid layer_idx", f"expected <= {LAYERS - 1}", f"got {LAYERS}")):
        mha_batch().kv.value_cache(LAYERS)


@pytest.mark.parametrize("kwargs, match", [
    case({"quantization_granularity": None},
         says("Invalid quantization_granularity", "expected an int", "got NoneType"), "granularity-missing"),
    case({"quantization_granularity": 0}, says("Invalid quantization_granularity", "expected >= 1", "got 0"),
         "granularity-0"),
    case({"quantization_granularity": HEAD + 1},
         says("Invalid quantization_granularity", f"expected <= {HEAD}", f"got {HEAD + 1}"), "granularity-past-row"),
    case({"rope_aware": True, "qk_rope_head_dim": 0}, says("Invalid qk_rope_head_dim", "expected >= 1", "got 0"),
         "rope-aware-rope-0"),
    case({"rope_aware": True, "qk_rope_head_dim": HEAD},
         says("Invalid qk_rope_head_dim", f"expected <= {HEAD - 1}", f"got {HEAD}"), "rope-aware-whole-row"),
])
def test_quantize_kv_cache(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pm.quantize_kv_cache(mla_batch().kv, **kwargs)


def test_quantize_kv_cache_of_fp8_cache():
    with pytest.raises(ValueError, match=says("Invalid kv_collection", "expected a bf16/fp16/fp32 cache",
                                              "got an FP8 cache")):
        pm.quantize_kv_cache(fp8_cache(mla_batch().kv), 16)


def test_quantize_kv_cache_of_non_collection():
    with pytest.raises(ValueError, match=says("Invalid type of kv_collection", "expected PagedKVCacheCollection",
                                              "got Tensor")):
        pm.quantize_kv_cache(mla_batch().kv.blocks, 16)


def test_row_offsets_negative_length():
    with pytest.raises(ValueError, match=says("lengths", "got -1")):
        pm.row_offsets([2, -1])


# ---- PagedKVCacheManager ----

def _manager(num_blocks: int = 4) -> pm.PagedKVCacheManager:
    """page_size 4; request 'a' holds 5 committed tokens (2 pages), 'b' holds 0."""
    m = pm.PagedKVCacheManager(pm.KVCacheParams(**PARAMS), num_blocks)
    m.claim("a")
    m.step(["a"], [5])
    m.commit(["a"], [5])
    m.claim("b")
    return m


def _state(m):
    return (m.num_free_blocks, {r: (m.pages(r), m.length(r)) for r in ("a", "b")})


@pytest.mark.parametrize("kwargs, match", [
    case({"num_blocks": 0}, says("Invalid num_blocks", "expected >= 1", "got 0"), "num_blocks-0"),
    case({"num_blocks": 4, "max_pages_per_request": 0}, says("Invalid max_pages_per_request", "expected >= 1", "got 0"),
         "max_pages-0"),
    case({"num_blocks": 4, "max_pages_per_request": 2.0},
         says("Invalid max_pages_per_request", "expected an int", "got float"), "max_pages-float"),
])
def test_manager_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pm.PagedKVCacheManager(pm.KVCacheParams(**PARAMS), **kwargs)


@pytest.mark.parametrize("action", [
    pytest.param(lambda m: m.reserve("a", 4), id="reserve"),
    pytest.param(lambda m: m.step(["b", "a"], [1, 4]), id="step-all-or-nothing"),
])
def test_manager_max_pages_per_request(action):
    m = pm.PagedKVCacheManager(pm.KVCacheParams(**PARAMS), 8, max_pages_per_request=2)
    m.claim("a")
    m.step(["a"], [5])
    m.commit(["a"], [5])
    m.claim("b")
    before = _state(m)
    with pytest.raises(ValueError, match=says("Invalid num_new_tokens for 'a'", "expected at most 3 more tokens",
                                              "(max_pages_per_request=2)", "got 4")):
        action(m)
    assert _state(m) == before


def test_manager_params_type():
    with pytest.raises(ValueError, match=says("Invalid type of params", "expected KVCacheParams", "got dict")):
        pm.PagedKVCacheManager(dict(PARAMS), 4)


@pytest.mark.parametrize("action, exc, match", [
    pytest.param(lambda m: m.reserve("b", 9), pm.OutOfPagesError, says("needs 3 new pages of 4 tokens", "2 are free"),
                 id="reserve-exhausts-pool"),
    pytest.param(lambda m: m.step(["b", "a"], [4, 8]), pm.OutOfPagesError,
                 says("needs 3 new pages of 4 tokens", "2 are free"), id="step-exhausts-pool-all-or-nothing"),
    pytest.param(lambda m: m.claim("a"), ValueError, says("Invalid request_id", "expected a new request", "got 'a'"),
                 id="claim-existing"),
    pytest.param(lambda m: m.claim("c", share_prefix_from="a", num_shared_tokens=-1), ValueError,
                 says("Invalid num_shared_tokens", "expected >= 0", "got -1"), id="claim-negative-shared"),
    pytest.param(lambda m: m.claim("c", share_prefix_from="zz", num_shared_tokens=4), ValueError,
                 says("share_prefix_from", "got 'zz'"), id="claim-share-from-unknown"),
    pytest.param(lambda m: m.reserve("b", -1), ValueError, says("Invalid num_new_tokens", "expected >= 0", "got -1"),
                 id="reserve-negative"),
    *[pytest.param(action, ValueError, says("Invalid request_id", "expected a claimed request", "got 'zz'"),
                   id=f"{name}-unknown")
      for name, action in (("length", lambda m: m.length("zz")), ("pages", lambda m: m.pages("zz")),
                           ("reserve", lambda m: m.reserve("zz", 1)), ("step", lambda m: m.step(["b", "zz"], [4, 1])),
                           ("commit", lambda m: m.commit(["zz"], [1])), ("release", lambda m: m.release("zz")))],
    pytest.param(lambda m: m.step(["a", "b"], [1]), ValueError,
                 says("Invalid num_new_tokens", "expected 2 counts (one per request)", "got 1"),
                 id="step-count-mismatch"),
    pytest.param(lambda m: m.step(["a", "a"], [1, 1]), ValueError,
                 says("Invalid request_ids", "expected distinct requests", "got ['a', 'a']"), id="step-duplicate-ids"),
    pytest.param(lambda m: m.step(["a"], [-1]), ValueError, says("Invalid num_new_tokens", "expected >= 0", "got -1"),
                 id="step-negative"),
    pytest.param(lambda m: m.commit(["a"], [4]), ValueError,
                 says("Invalid num_new_tokens for 'a'", "expected at most 3 (reserved)", "got 4"),
                 id="commit-beyond-reserved"),
    pytest.param(lambda m: m.commit(["a", "b"], [1, 1]), ValueError,
                 says("Invalid num_new_tokens for 'b'", "expected at most 0 (reserved)", "got 1"),
                 id="commit-all-or-nothing"),
    pytest.param(lambda m: m.commit(["a"], [-2]), ValueError, says("Invalid num_new_tokens", "got -2"),
                 id="commit-negative"),
    pytest.param(lambda m: m.commit(["a", "b"], [1]), ValueError,
                 says("Invalid num_new_tokens", "expected 2 counts", "got 1"), id="commit-count-mismatch"),
    pytest.param(lambda m: m.commit(["a", "a"], [2, 2]), ValueError, says("request_ids", "distinct", "'a'"),
                 id="commit-duplicate-ids"),
])
def test_manager_errors_leave_state_unchanged(action, exc, match):
    m = _manager()
    before = _state(m)
    with pytest.raises(exc, match=match):
        action(m)
    assert _state(m) == before


def test_manager_release_twice():
    m = _manager()
    m.release("b")
    with pytest.raises(ValueError, match=says("Invalid request_id", "expected a claimed request", "got 'b'")):
        m.release("b")
