"""Property tests over random ragged batches (hypothesis): plan coverage, decode vs a naive oracle,
chunked prefill independent of the buffer size."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pagedmla as pm
from pagedmla.testing import assert_close, make_paged_batch
from test_reference import HEAD, ROPE, _prefill_inputs, naive_decode

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def ragged_batches(draw, max_batch=4, max_cached=20, max_new=5, min_new=0):
    batch = draw(st.integers(1, max_batch))
    cached = draw(st.lists(st.integers(0, max_cached), min_size=batch, max_size=batch))
    new = draw(st.lists(st.integers(min_new, max_new), min_size=batch, max_size=batch))
    page_size = draw(st.sampled_from([1, 2, 3, 4, 16]))
    return cached, new, page_size, draw(st.integers(0, 2**16))


@SETTINGS
@given(ragged_batches(max_batch=6, max_cached=60, max_new=40), st.integers(1, 100))
def test_plan_covers_every_aligned_position_exactly_once(batch, buffer_size):
    cached, new, page_size, seed = batch
    pb = make_paged_batch(cached, new, head_size=HEAD, page_size=page_size, seed=seed)
    aligned = [-(-t // page_size) * page_size for t in pb.totals]
    chunks = -(-sum(aligned) // buffer_size)
    bro, co, lengths = pm.mla_prefill_plan(pb.input_row_offsets, pb.kv, buffer_size, max(chunks, 1) + 1,
                                           backend="reference")
    seen = [[] for _ in cached]
    for c in range(bro.shape[0]):
        if lengths[c] < 0:
            assert c >= chunks
            continue
        assert int(lengths[c]) == int(bro[c, -1]) <= buffer_size
        for b in range(len(cached)):
            n_rows = int(bro[c, b + 1] - bro[c, b])
            seen[b].extend(range(int(co[c, b]), int(co[c, b]) + n_rows))
    for b, positions in enumerate(seen):
        assert positions == list(range(aligned[b]))


@SETTINGS
@given(ragged_batches(min_new=1), st.sampled_from(["null", "causal", "sliding_window_causal", "chunked_causal"]),
       st.integers(1, 6), st.integers(1, 4))
def test_decode_matches_naive_on_random_batches(batch, mask, window, parts):
    cached, new, page_size, seed = batch
    pb = make_paged_batch(cached, new, head_size=HEAD, page_size=page_size, seed=seed)
    q = torch.randn(pb.num_rows, 2, HEAD, generator=torch.Generator().manual_seed(seed))
    out = pm.mla_decode_kv_cache_ragged(q, pb.input_row_offsets, pb.kv, 0, 0.25, mask=mask, local_window_size=window,
                                        num_partitions=parts, qk_rope_head_dim=ROPE, backend="reference")
    want, _ = naive_decode(pb, q, 0.25, mask, window)
    assert_close(out, want, atol=1e-5, rtol=1e-5)


@SETTINGS
@given(ragged_batches(max_batch=3, max_cached=12, max_new=9), st.integers(1, 40))
def test_chunked_prefill_does_not_depend_on_buffer_size(batch, buffer_size):
    cached, new, page_size, seed = batch
    pb = make_paged_batch(cached, new, head_size=HEAD, page_size=page_size, seed=seed)
    w_kv_b, q = _prefill_inputs(pb, 2, 8, 12, seed=seed)
    one = pm.mla_prefill(q, pb.input_row_offsets, pb.kv, 0, w_kv_b, 0.3, buffer_size=4096, backend="reference")
    many = pm.mla_prefill(q, pb.input_row_offsets, pb.kv, 0, w_kv_b, 0.3, buffer_size=buffer_size,
                          backend="reference")
    assert_close(many, one, atol=2e-6, rtol=1e-5)
