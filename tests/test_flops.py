"""FLOP and byte formulas (pagedmla.testing.flops) and the shapes registry (pagedmla.testing.shapes)."""

import itertools

import pytest
import torch

from pagedmla.masks import MASK_CODES, visible
from pagedmla.testing import flops as fl
from pagedmla.testing.shapes import MODELS, SUITES, BenchCase, ModelShape, cases, model_for_heads, override_cases

V3, TP8, KIMI = MODELS["deepseek-v3"], MODELS["deepseek-v3-tp8"], MODELS["kimi-k2"]


@pytest.mark.parametrize("batch,keys,heads", [
    pytest.param(1, 16384, 128, id="B1-N16384-H128"),
    pytest.param(16, 4096, 16, id="B16-N4096-H16"),
    pytest.param(3, 1, 1, id="B3-N1-H1"),
])
def test_decode_matches_the_dense_formula(batch, keys, heads):
    cost = fl.decode_cost([1] * batch, [keys - 1] * batch, num_heads=heads)
    assert cost.flops == 2 * batch * heads * keys * (576 + 512)
    cache = batch * keys * 576 * 2
    q_and_out = batch * heads * (576 + 512) * 2
    assert cost.bytes == cache + q_and_out


def test_decode_counts_cache_rows_once_per_sequence_and_skips_idle_sequences():
    one = fl.decode_cost([1], [99], num_heads=128)
    four = fl.decode_cost([4], [96], num_heads=128)
    assert four.bytes - one.bytes == 3 * 128 * (576 + 512) * 2
    idle = fl.decode_cost([1, 0], [99, 5000], num_heads=128)
    assert idle == one


def test_mtp_counts_the_causal_keys_of_each_query_token():
    # Two tokens on 4094 cached: the first sees 4095 keys, the second 4096.
    cost = fl.decode_cost([2] * 64, [4094] * 64, num_heads=128)
    assert cost.flops == 2 * 128 * (576 + 512) * 64 * (4095 + 4096)
    null = fl.decode_cost([2] * 64, [4094] * 64, num_heads=128, mask="null")
    assert null.flops == 2 * 128 * (576 + 512) * 64 * 2 * 4096


def test_fp8_rows_change_bytes_only():
    bf16 = fl.decode_cost([1] * 8, [1023] * 8, num_heads=16)
    fp8 = fl.decode_cost([1] * 8, [1023] * 8, num_heads=16, cache_row_bytes=644)
    assert fp8.flops == bf16.flops
    assert bf16.bytes - fp8.bytes == 8 * 1024 * (1152 - 644)


@pytest.mark.parametrize("mask,window", [
    pytest.param(m, w, id=f"{m}-W{w}") for m, w in itertools.product(MASK_CODES, (1, 3, 8)) if w == 3 or m in (
        "sliding_window_causal", "chunked_causal")
])
def test_visible_keys_agree_with_the_mask_rule(mask, window):
    new, cached = [1, 3, 5, 0], [0, 4, 9, 7]
    want = 0
    code = MASK_CODES[mask]
    for n, length in zip(new, cached):
        q_pos = torch.arange(length, length + n).view(-1, 1)
        k_pos = torch.arange(length + n).view(1, -1)
        want += int(visible(q_pos, k_pos, length + n, code, window).sum())
    assert fl.visible_keys(new, cached, mask=mask, local_window_size=window) == want


def test_sparse_decode():
    cost = fl.sparse_decode_cost(128, num_heads=128, topk=2048)
    assert cost.flops == 2 * 128 * 128 * 2048 * (576 + 512)
    assert cost.bytes == 128 * 2048 * (1152 + 4) + 128 * 128 * (576 + 512) * 2
    shared = fl.sparse_decode_cost(128, num_heads=128, topk=2048, index_rows=64, cache_row_bytes=644)
    assert shared.flops == cost.flops
    assert shared.bytes == 64 * 2048 * (644 + 4) + 128 * 128 * (576 + 512) * 2


@pytest.mark.parametrize("batch,length,heads", [
    pytest.param(1, 8192, 128, id="B1-L8192-H128"),
    pytest.param(2, 4096, 16, id="B2-L4096-H16"),
    pytest.param(3, 7, 2, id="B3-L7-H2"),
])
def test_prefill_matches_the_causal_formula(batch, length, heads):
    cost = fl.prefill_cost([length] * batch, [0] * batch, num_heads=heads)
    assert cost.flops == batch * heads * length * length * (192 + 128)
    assert fl.sdpa_cost(batch, length, num_heads=heads).flops == cost.flops
    per_token = heads * (192 + 128) + heads * (128 + 128) + 64
    assert cost.bytes == batch * length * per_token * 2


def test_prefill_with_cache_prefixes_is_ragged():
    new, cached = [5, 0, 3], [10, 4, 0]
    cost = fl.prefill_cost(new, cached, num_heads=2, qk_head_dim=24, v_head_dim=16, qk_rope_head_dim=8)
    pairs2 = sum(2 * n * c + n * n for n, c in zip(new, cached))
    assert cost.flops == 2 * (24 + 16) * pairs2
    keys = sum(n + c for n, c in zip(new, cached))
    assert cost.bytes == 2 * (8 * 2 * (24 + 16) + keys * 2 * (16 + 16) + keys * 8)
    dense = fl.prefill_cost(new, cached, num_heads=2, qk_head_dim=24, v_head_dim=16, causal=False)
    assert dense.flops == 2 * 2 * (24 + 16) * sum(n * (n + c) for n, c in zip(new, cached))


def test_gemm_shaped_operations():
    dec = fl.decompress_cost(16384, out_features=32768)
    assert dec.flops == 2 * 16384 * 512 * 32768
    assert dec.bytes == 2 * (2 * 16384 * 512 + 32768 * 512 + 16384 * 32768)
    cw = fl.cache_write_cost(4096, in_features=7168)
    assert cw.flops == 2 * 4096 * 7168 * 576
    assert cw.bytes == 2 * (4096 * 7168 + 576 * 7168 + 4096 * 576)
    assert fl.matmul_cost(4096, 576, 7168) == cw
    assert fl.copy_cost(1000) == fl.Cost(0, 2000)


def test_roofline_and_bound():
    cost = fl.Cost(flops=1000, bytes=10)
    assert cost.intensity == 100
    assert cost.roofline_seconds(copy_bytes_per_s=1.0, matmul_flops_per_s=1.0) == 1000
    assert cost.bound(1.0, 1.0) == "compute"
    assert cost.bound(1.0, 1e6) == "memory"
    assert fl.Cost(0, 0).intensity == 0.0


# PERF.md rows: (case, microseconds, the table's TFLOP/s or TB/s). Our formulas must reproduce its ratios.
PERF_ROWS = [
    pytest.param(BenchCase("decode", V3, 16, 4096), 44.2, 413, None, id="decode-B16-N4096-H128"),
    pytest.param(BenchCase("decode", V3, 1, 16384), 36.4, 125, None, id="decode-B1-N16384-H128"),
    pytest.param(BenchCase("decode", TP8, 16, 4096), 28.7, None, 2.65, id="decode-B16-N4096-H16"),
    pytest.param(BenchCase("decode", TP8, 128, 8192), 301.6, None, 4.02, id="decode-B128-N8192-H16"),
    pytest.param(BenchCase("mtp", V3, 64, 4096, query_tokens=2), 247.7, 590, None, id="mtp-B64-q2-H128"),
    pytest.param(BenchCase("sparse", V3, 64, 8192, query_tokens=2, topk=2048, kv_dtype="fp8"), 180.0, 406, None,
                 id="sparse-B64-H128"),
    pytest.param(BenchCase("prefill", V3, 1, 8192), 4806, 572, None, id="prefill-B1-L8192-H128"),
    pytest.param(BenchCase("prefill", TP8, 2, 4096), 333, 516, None, id="prefill-B2-L4096-H16"),
    pytest.param(BenchCase("decompress", V3, 4, 4096), 949, 579, None, id="decompress-H128"),
    pytest.param(BenchCase("cache-write", V3, 1, 4096), 47.5, 712, None, id="k-proj-4096"),
]


@pytest.mark.parametrize("case,us,tflops,tbps", PERF_ROWS)
def test_formulas_reproduce_perf_md(case, us, tflops, tbps):
    cost = case.cost()
    if tflops is not None:
        assert cost.flops / (us * 1e-6) / 1e12 == pytest.approx(tflops, rel=0.01)
    if tbps is not None:
        assert cost.bytes / (us * 1e-6) / 1e12 == pytest.approx(tbps, rel=0.01)


def test_bad_inputs_are_value_errors():
    with pytest.raises(ValueError, match="new_lengths"):
        fl.decode_cost([-1], [0], num_heads=1)
    with pytest.raises(ValueError, match="cache_lengths"):
        fl.decode_cost([1, 1], [0], num_heads=1)
    with pytest.raises(ValueError, match="mask"):
        fl.visible_keys([1], [0], mask="diagonal")
    with pytest.raises(ValueError, match="local_window_size"):
        fl.visible_keys([1], [0], mask="chunked")


def test_registry_covers_every_suite_and_the_three_models():
    everything = cases("all")
    assert {c.suite for c in everything} == set(SUITES)
    assert {c.num_heads for c in everything} >= {16, 64, 128}
    names = [c.name for c in everything]
    assert len(names) == len(set(names))
    decode = {(c.batch, c.keys, c.num_heads) for c in cases("decode")}
    want = {(b, n, h) for b, n in ((1, 16384), (16, 4096), (64, 4096), (128, 4096), (128, 8192), (32, 32768))
            for h in (128, 16)}
    assert decode == want
    prefill = {(c.batch, c.keys, c.num_heads) for c in cases("prefill") if not c.cache_prefix}
    assert prefill == {(1, 8192, 128), (4, 4096, 128), (16, 1024, 128), (2, 4096, 16)}
    assert all(c.topk == 2048 and c.query_tokens == 2 for c in cases("sparse"))
    assert V3.head_size == 576 and V3.qk_head_dim == 192 and V3.kv_b_proj_rows == 128 * 256
    with pytest.raises(ValueError, match="suite"):
        cases("encode")


def test_models_by_heads():
    assert model_for_heads(128) is V3 and model_for_heads(16) is TP8 and model_for_heads(64) is KIMI
    other = model_for_heads(32)
    assert other.num_heads == 32 and other.head_size == 576
    with pytest.raises(ValueError, match="num_heads"):
        model_for_heads(0)


def test_overrides_take_the_product_and_drop_duplicates():
    one = override_cases(cases("decode"), heads=[16], batch=[4], keys=[1024])
    assert [c.name for c in one] == ["decode B4 N1024 H16"]
    grid = override_cases(cases("decode"), heads=[16, 64], batch=[1, 2], keys=[256])
    assert len(grid) == 4
    # The cache write does not depend on heads; sparse caps topk at the keys.
    assert len(override_cases(cases("cache-write"), heads=[16, 128])) == len(cases("cache-write"))
    sparse = override_cases(cases("sparse"), keys=[512])
    assert all(c.topk == 512 for c in sparse)
    prefill = override_cases(cases("prefill"), keys=[256])
    assert all(c.cache_prefix == 0 for c in prefill)
    with pytest.raises(ValueError, match="query_tokens"):
        override_cases(cases("mtp"), keys=[1])


@pytest.mark.parametrize("kwargs,match", [
    pytest.param({"suite": "decode", "batch": 0, "keys": 8}, "batch", id="batch0"),
    pytest.param({"suite": "sparse", "batch": 1, "keys": 8, "topk": 9}, "topk", id="topk-past-keys"),
    pytest.param({"suite": "prefill", "batch": 1, "keys": 8, "kv_dtype": "fp8"}, "kv_dtype", id="fp8-prefill"),
    pytest.param({"suite": "attend", "batch": 1, "keys": 8}, "suite", id="suite"),
])
def test_bad_cases_are_value_errors(kwargs, match):
    model = ModelShape("tiny", 2)
    with pytest.raises(ValueError, match=match):
        BenchCase(model=model, **kwargs)
