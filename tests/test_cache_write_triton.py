"""Triton cache-write kernels against the float32 reference: projections stored by the GEMM epilogue, RMS norm
and rope in place. CPU tier under the interpreter at tiny sizes; the gpu tier at DeepSeek-V3 sizes."""

from __future__ import annotations

import dataclasses
import random
import sys

import pytest
import torch

from pagedmla import ops
from pagedmla.configs.cache_write import MAX_SPLIT_K, MatmulToCacheConfig, matmul_to_cache_heuristic
from pagedmla.ops import _triton_cache_write
from pagedmla.testing import adversarial_lengths, assert_close, assert_close_to_reference, make_paged_batch

ATOL32 = 2e-5  # float32 math against the float32 reference (measured errors are ~1e-6)


def _batch(page_size, *, head_size=80, num_heads=1, is_mla=True, dtype=torch.float32, device="cpu", seed=0,
           fill_new_tokens=False, lengths=None):
    """Cached prefixes and new tokens drawn from the adversarial lengths (empty and one-token sequences too)."""
    adv = adversarial_lengths(page_size)
    cached, new = lengths or (adv, list(reversed(adv)))
    return make_paged_batch(cached, new, head_size=head_size, num_heads=num_heads, is_mla=is_mla,
                            page_size=page_size, dtype=dtype, device=device, seed=seed,
                            fill_new_tokens=fill_new_tokens)


def _twin(pb, dtype=None):
    """A second collection over a copy of the blocks (the reference writes one, the kernel the other); with
    dtype=float32 an unrounded twin, so a bf16 kernel is measured against exact float32 results."""
    if dtype is None:
        return pb.kv.replace(blocks=pb.kv.blocks.clone())
    return pb.kv.replace(blocks=pb.kv.blocks.to(dtype), params=dataclasses.replace(pb.kv.params, dtype=dtype))


def _randn(*shape, dtype=torch.float32, device="cpu", seed=1, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g)).to(dtype).to(device)


def _where_blocks_differ(actual, expected, bound):
    """Which slots differ: NaN-placement mismatches and the worst elements beyond `bound` (for the message)."""
    a, e = actual.double().cpu(), expected.double().cpu()
    nan_mismatch = torch.isnan(a) != torch.isnan(e)
    over = ((a - e).abs() > bound.double().cpu()) & torch.isfinite(e) & torch.isfinite(a)
    worst = ((a - e).abs() - bound.double().cpu()).masked_fill(~over, float("-inf")).flatten().topk(
        min(5, int(over.sum()))).indices if bool(over.any()) else []
    rows = [tuple(int(i) for i in torch.unravel_index(torch.tensor(w), a.shape)) for w in worst]
    return (f"{int(nan_mismatch.sum())} NaN-placement mismatches (first at "
            f"{[tuple(int(i) for i in x) for x in nan_mismatch.nonzero()[:3].tolist()]}), {int(over.sum())} "
            f"elements beyond the bound; worst (block, kv, layer, slot, head, col) actual/expected: "
            + ", ".join(f"{r} {float(a[r]):.5g}/{float(e[r]):.5g}" for r in rows))


def _check_blocks(actual, expected, lowprec=None, eps=1e-5):
    """Whole pools compared: written rows close, every other slot (NaN included) bit-identical."""
    if lowprec is None:
        assert_close(actual.float(), expected.float(), atol=ATOL32, rtol=1e-5, name="blocks")
        return
    try:
        assert_close_to_reference(actual.float(), expected.float(), lowprec.float(), eps=eps, name="blocks")
    except AssertionError as exc:
        bound = eps + 2 * (lowprec.float() - expected.float()).abs().nan_to_num(0.0)
        raise AssertionError(f"{exc}; {_where_blocks_differ(actual.float(), expected.float(), bound)}") from None


# 80 output columns, 48 input features (3 K blocks of 16): tail tiles for columns [64, 80), K splits into pieces
# of 2 + 1 blocks (split 2), 1 + 1 + 1 (split 3) and 1 + 1 + 1 + 0 (split 4: an empty last piece)
_TAIL = MatmulToCacheConfig(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=1, num_stages=1,
                            tail_block_n=16, tail_split_k=3)
_SPLIT = MatmulToCacheConfig(block_m=16, block_n=32, block_k=16, group_m=2, num_warps=1, num_stages=1, split_k=2,
                             tail_block_n=16, tail_split_k=4)
_SPLIT_NO_TAIL = MatmulToCacheConfig(block_m=32, block_n=16, block_k=16, group_m=1, num_warps=1, num_stages=1,
                                     split_k=3)
_TMA = MatmulToCacheConfig(block_m=16, block_n=32, block_k=32, group_m=2, num_warps=1, num_stages=1, tma=True)
_TMA_SPLIT = MatmulToCacheConfig(block_m=16, block_n=64, block_k=16, group_m=2, num_warps=1, num_stages=1, tma=True,
                                 split_k=2, tail_block_n=16, tail_split_k=2)

# stream-K with one program: every tile whole, stored at once
_STREAM_ONE = MatmulToCacheConfig(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=1, num_stages=1,
                                  tail_block_n=16, stream_workers=1)


@pytest.mark.parametrize("page_size,config", [pytest.param(1, None, id="ps1"), pytest.param(3, None, id="ps3"),
                                              pytest.param(16, None, id="ps16"),
                                              pytest.param(3, _TAIL, id="ps3-tail-split3"),
                                              pytest.param(1, _SPLIT, id="ps1-split2-tail-split4"),
                                              pytest.param(16, _SPLIT_NO_TAIL, id="ps16-split3"),
                                              pytest.param(16, _TMA, id="ps16-tma"),
                                              pytest.param(3, _TMA_SPLIT, id="ps3-tma-split2-tail"),
                                              pytest.param(1, _STREAM_ONE, id="ps1-stream1")])
def test_k_matmul(page_size, config):
    """Tail configs give columns [64, 80) their own 16-wide tiles in the same launch; split configs cut each
    tile's K range into pieces whose float32 partials the tile's last piece sums and stores; TMA configs read x
    and w through tensor descriptors (a partial K tile read as zeros)."""
    pb = _batch(page_size)
    ref = _twin(pb)
    x = _randn(pb.num_rows, 48)
    w = _randn(80, 48, seed=2, scale=0.2)
    if config is None:
        ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, pb.kv, 1, backend="triton")
    else:
        kv = pb.kv
        _triton_cache_write.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths,
                                                  kv.lookup_table, 1, config)
    ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 1, backend="reference")
    _check_blocks(pb.kv.blocks, ref.blocks)


@pytest.fixture
def shuffled_grid(monkeypatch):
    """Programs in a random order. The interpreter runs them one at a time in program-id order, so a split tile's
    last piece would always finish last; the kernel must not depend on that. Its grid loop calls `range` from
    `__call__` (Triton 3.6); the fixture shadows that `range` and records each shuffle, so that a test using it
    can check that the shuffle really happened."""
    from triton.runtime import interpreter

    rng = random.Random(7)
    shuffles = []

    def shuffled_range(*args):
        values = list(range(*args))
        if sys._getframe(1).f_code.co_name == "__call__" and len(values) > 1:
            rng.shuffle(values)
            shuffles.append(len(values))
        return values

    monkeypatch.setattr(interpreter, "range", shuffled_range, raising=False)
    return shuffles


def _tile(block_n, block_k=16, **kwargs):
    return MatmulToCacheConfig(block_m=16, block_n=block_n, block_k=block_k, group_m=2, num_warps=1, num_stages=1,
                               **kwargs)


@pytest.mark.parametrize("head_size,in_features,config", [
    pytest.param(80, 48, _SPLIT, id="80x48-split2-tail16-split4"),
    # 3 K blocks in 5 pieces (two empty); tail columns [96, 112)
    pytest.param(112, 44, _tile(32, split_k=5, tail_block_n=16, tail_split_k=2), id="112x44-split5-tail16"),
    # one 32-wide tail tile holding the last 16 columns (half masked), K not a multiple of the K tile
    pytest.param(144, 40, _tile(64, split_k=2, tail_block_n=32, tail_split_k=3), id="144x40-tail32-masked"),
    # two 16-wide tail tiles over the last 24 columns
    pytest.param(120, 40, _tile(32, block_k=32, split_k=2, tail_block_n=16, tail_split_k=2), id="120x40-two-tails"),
    # fewer columns than one tile: no tail tiles, the split tile masks its columns
    pytest.param(48, 48, _tile(64, split_k=3, tail_block_n=16, tail_split_k=2), id="48x48-narrow"),
    pytest.param(80, 48, dataclasses.replace(_TMA_SPLIT, split_k=3), id="80x48-tma-split3-tail"),
    # the tail tile's K pieces run by the main programs of its row tile: 2, 3 and 4 pieces (one empty), TMA
    # operands, and leftover columns wider than one tail tile (falls back to tail programs)
    pytest.param(80, 48, _tile(32, tail_block_n=16, tail_in_main=True), id="80x48-tail-in-main"),
    pytest.param(112, 44, _tile(32, tail_block_n=16, tail_in_main=True), id="112x44-tail-in-main-3"),
    pytest.param(144, 40, _tile(32, block_k=16, tail_block_n=16, tail_in_main=True), id="144x40-tail-in-main-4"),
    pytest.param(80, 48, dataclasses.replace(_TMA, block_k=16, tail_block_n=16, tail_in_main=True),
                 id="80x48-tma-tail-in-main"),
    pytest.param(120, 40, _tile(32, tail_block_n=16, tail_split_k=2, tail_in_main=True),
                 id="120x40-tail-in-main-two-tails"),
    # stream-K in groups: column tiles of block_n + tail_block_n (the last one masked), spans that cut row tiles
    # mid-K, a row tile shared by up to 3 groups, TMA operands, K not a multiple of the K tile
    pytest.param(80, 48, _tile(32, tail_block_n=16, stream_workers=7), id="80x48-stream7-tail16"),
    pytest.param(80, 48, _tile(32, tail_block_n=16, stream_workers=40), id="80x48-stream40-tail16"),
    pytest.param(112, 44, _tile(32, tail_block_n=16, stream_workers=9), id="112x44-stream9-tail16"),
    pytest.param(144, 40, _tile(64, tail_block_n=32, stream_workers=6), id="144x40-stream6-tail32-masked"),
    pytest.param(48, 48, _tile(64, stream_workers=3), id="48x48-stream3-narrow"),
    pytest.param(80, 48, dataclasses.replace(_TMA, block_k=16, tail_block_n=16, stream_workers=9),
                 id="80x48-tma-stream9-tail16"),
])
def test_k_matmul_split_any_arrival_order(shuffled_grid, head_size, in_features, config):
    """Split tiles (and stream-K's shared tiles) give the reference's rows whichever piece finishes last
    (programs run in a shuffled order), with tails of several widths, masked tail columns, partial and empty K
    pieces."""
    pb = _batch(3, head_size=head_size)
    ref = _twin(pb)
    x = _randn(pb.num_rows, in_features)
    w = _randn(head_size, in_features, seed=2, scale=0.2)
    kv = pb.kv
    _triton_cache_write.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths,
                                              kv.lookup_table, 1, config)
    assert shuffled_grid, "the interpreter's grid loop was not shuffled (the fixture's hook no longer applies)"
    ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 1, backend="reference")
    _check_blocks(pb.kv.blocks, ref.blocks)


# 103 new rows in 7 row tiles of 16: spans longer than a row tile's K blocks (a group finishes one row tile,
# runs whole ones and starts the next), with and without the second column part, TMA and pointer operands
_STREAM_LENGTHS = ([0, 5, 17, 3], [40, 1, 33, 29])


@pytest.mark.parametrize("head_size,in_features,config", [
    pytest.param(80, 44, _tile(32, tail_block_n=16, stream_workers=6), id="80x44-stream6-tail16"),
    pytest.param(80, 48, dataclasses.replace(_TMA, block_k=16, tail_block_n=16, stream_workers=6),
                 id="80x48-tma-stream6-tail16"),
    pytest.param(80, 40, dataclasses.replace(_TMA, block_k=16, tail_block_n=16, stream_workers=6),
                 id="80x40-tma-stream6-tail16-partial-k"),
    pytest.param(48, 40, _tile(32, stream_workers=4), id="48x40-stream4-one-part"),
    pytest.param(48, 40, dataclasses.replace(_TMA, block_k=16, stream_workers=4), id="48x40-tma-stream4-one-part"),
    # spans of exactly two / one whole row tiles (3 K blocks each): no row tile shared, no workspace
    pytest.param(80, 48, _tile(32, tail_block_n=16, stream_workers=8), id="80x48-stream8-whole-row-tiles"),
    pytest.param(80, 48, dataclasses.replace(_TMA, block_k=16, tail_block_n=16, stream_workers=14),
                 id="80x48-tma-stream14-whole-row-tiles"),
    pytest.param(144, 48, dataclasses.replace(_TMA, block_n=64, block_k=16, tail_block_n=32, stream_workers=4),
                 id="144x48-tma-stream4-masked-column-tile"),
])
@pytest.mark.parametrize("order", ["in-order", "shuffled"])
def test_k_matmul_stream_k_long_spans(request, order, head_size, in_features, config):
    """Stream-K groups whose spans cover more than one row tile, run in program order and in three shuffled
    orders: every row tile shared by two groups is summed whole whichever group finishes last."""
    shuffles = request.getfixturevalue("shuffled_grid") if order == "shuffled" else None
    x = _randn(103, in_features)
    w = _randn(head_size, in_features, seed=2, scale=0.2)
    for _ in range(3 if shuffles is not None else 1):
        pb = _batch(16, head_size=head_size, lengths=_STREAM_LENGTHS)
        assert pb.num_rows == 103
        ref = _twin(pb)
        kv = pb.kv
        _triton_cache_write.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths,
                                                  kv.lookup_table, 1, config)
        ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 1, backend="reference")
        _check_blocks(pb.kv.blocks, ref.blocks)
    assert shuffles is None or len(shuffles) == 3


def test_matmul_heuristic_tail_in_main():
    """Unsplit 128 x 128 tiles with one tail tile per row tile (576 = 4 x 128 + 64) run the tail in the main
    programs below the stream-K rows; split main tiles (few rows), whole column tiles, leftover columns wider than
    one tail tile and the interpreter keep tail programs."""
    for rows in (3072, 4096, 8192):
        cfg = matmul_to_cache_heuristic(rows, 576, 7168, num_sms=132)
        assert cfg.tail_in_main and cfg.split_k == 1 and cfg.tail_block_n == 64
        assert (cfg.num_warps, cfg.num_stages, cfg.stream_workers) == (4, 5, 0)
    assert not matmul_to_cache_heuristic(1024, 576, 7168, num_sms=132).tail_in_main  # split main tiles
    assert not matmul_to_cache_heuristic(4096, 512, 7168, num_sms=132).tail_in_main  # no leftover columns
    assert not matmul_to_cache_heuristic(4096, 512 + 96, 7168, num_sms=132).tail_in_main  # 96 > 64: two tails
    assert matmul_to_cache_heuristic(16384, 576, 7168, num_sms=132).stream_workers == 132
    assert not matmul_to_cache_heuristic(4096, 576, 7168, num_sms=132, interpret=True).tail_in_main


@pytest.mark.parametrize("kwargs,match", [
    (dict(block_m=24), "block_m: expected a power of two >= 16, got 24"),
    (dict(split_k=0), "split_k: expected >= 1, got 0"),
    (dict(block_n=64, tail_block_n=64), r"tail_block_n: expected 0 or a power of two in \[16, block_n = 64\), got 64"),
    (dict(tail_block_n=8), "tail_block_n"),
    (dict(stream_workers=-1), r"stream_workers: expected >= 0 \(0: off\), got -1"),
])
def test_matmul_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MatmulToCacheConfig(**kwargs)


@pytest.mark.parametrize("rows,out_features,stream", [(16384, 576, True), (20000, 576, True), (8192, 576, False),
                                                    (16384, 2048, False), (16384, 384, True),
                                                    (16384, 192 * 33, True), (16384, 192 * 34, False)])
def test_matmul_heuristic_stream_k(rows, out_features, stream):
    """Stream-K from STREAM_MIN_ROWS rows, for output widths that 192-column tiles cover exactly and that leave
    at least four groups (33 tiles on 132 SMs), with one program per SM; never in the interpreter (tests name
    stream configs themselves)."""
    cfg = matmul_to_cache_heuristic(rows, out_features, 7168, num_sms=132)
    assert (cfg.stream_workers > 0) == stream
    if stream:
        assert cfg.stream_workers == 132 and cfg.block_n + cfg.tail_block_n == 192 and cfg.tma
    assert matmul_to_cache_heuristic(rows, out_features, 7168, num_sms=132, interpret=True).stream_workers == 0


@pytest.mark.parametrize("rows", [1, 64, 256, 1024, 4096, 8192])
def test_matmul_heuristic_splits(rows):
    """The GPU heuristic at 7168 -> 576 on 132 SMs: split main tiles only when they fill under half the SMs,
    tail tiles only for a last column tile at most half full and split at least twice (into at most half as
    many pieces as SMs beyond that, unless the main programs run the tail), never more pieces than K blocks, and
    at least about half the SMs busy."""
    cfg = matmul_to_cache_heuristic(rows, 576, 7168, num_sms=132)
    tiles_m = -(-rows // cfg.block_m)
    full, rest = divmod(576, cfg.block_n)
    assert (cfg.tail_block_n > 0) == (0 < rest <= cfg.block_n // 2)
    main_tiles = tiles_m * (full if cfg.tail_block_n else -(-576 // cfg.block_n))
    assert (cfg.split_k > 1) == (2 * main_tiles < 132)
    assert 1 <= cfg.split_k <= min(MAX_SPLIT_K, -(-7168 // cfg.block_k))
    assert main_tiles * cfg.split_k <= 132 or cfg.split_k == 1
    if cfg.tail_block_n and not cfg.tail_in_main:
        tail_tiles = tiles_m * -(-rest // cfg.tail_block_n)
        assert 2 <= cfg.tail_split_k <= MAX_SPLIT_K
        assert 2 * tail_tiles * cfg.tail_split_k <= 132 or cfg.tail_split_k == 2
    assert main_tiles * cfg.split_k >= 66 or cfg.split_k == MAX_SPLIT_K


def test_k_matmul_bf16_operands_odd_k():
    """bf16 operands (float32 accumulation), in_features not a multiple of the K tile, layer 0.

    The cache is float32 here: the Triton 3.6 interpreter rounds float32 -> bf16 stores toward zero (the GPU
    rounds to nearest even), so bf16 stores are checked in the gpu tier.
    """
    pb = _batch(3)
    ref = _twin(pb)
    x = _randn(pb.num_rows, 40, dtype=torch.bfloat16)
    w = _randn(80, 40, dtype=torch.bfloat16, seed=2, scale=0.2)
    ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, pb.kv, 0, backend="triton")
    ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 0, backend="reference")
    _check_blocks(pb.kv.blocks, ref.blocks)


@pytest.mark.parametrize("page_size", [pytest.param(p, id=f"ps{p}") for p in (1, 16)])
def test_kv_matmul(page_size):
    pb = _batch(page_size, head_size=16, num_heads=3, is_mla=False)
    ref = _twin(pb)
    x = _randn(pb.num_rows, 32)
    w = _randn(2 * 3 * 16, 32, seed=3, scale=0.2)
    ops.kv_matmul_ragged_paged(x, pb.input_row_offsets, w, pb.kv, 1, backend="triton")
    ops.kv_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 1, backend="reference")
    _check_blocks(pb.kv.blocks, ref.blocks)


@pytest.mark.parametrize("page_size,cols", [pytest.param(p, c, id=f"ps{p}-cols{c}") for p, c in
                                            ((1, 64), (3, 64), (16, 48), (16, 80))])
def test_rms_norm(page_size, cols):
    """The kernel against the reference; eps = 0.5 is about mean(x^2) of these rows (randn), so an eps that the
    kernel dropped or misplaced shows."""
    for eps in (1e-6, 0.5):
        pb = _batch(page_size, fill_new_tokens=True)
        ref = _twin(pb)
        gamma = 1 + 0.1 * _randn(cols, seed=4)
        ops.rms_norm_key_cache(pb.kv, gamma, eps, 1, pb.input_row_offsets, cols, backend="triton")
        ops.rms_norm_key_cache(ref, gamma, eps, 1, pb.input_row_offsets, cols, backend="reference")
        _check_blocks(pb.kv.blocks, ref.blocks)


def test_rms_norm_grid_is_one_dimensional(monkeypatch):
    """A batch past CUDA's 65535 limit of the grid's y axis still launches: one program per (sequence, tile of
    its rows) on the x axis (the kernel is recorded, not run)."""
    from pagedmla.ops import _triton_cache_write as cw

    grids = []

    class _Record:
        def __getitem__(self, grid):
            grids.append(grid)
            return lambda *args, **kwargs: None
    monkeypatch.setattr(cw, "_rms_norm_cache_kernel", _Record())
    batch = 70_000
    blocks = torch.empty(4, 1, 1, 16, 1, 576)
    cw.rms_norm_key_cache(blocks, torch.zeros(batch, dtype=torch.int32), torch.zeros(batch, 1, dtype=torch.int32),
                          torch.ones(512), torch.arange(batch + 1, dtype=torch.int32), 0, 1e-6, 5,
                          config=cw.row_heuristic())
    block_rows = cw.row_heuristic().block_rows
    assert grids == [(batch * -(-5 // block_rows),)]


def test_rms_norm_bf16_unknown_max_seq_length():
    """max_seq_length left to the op (read from the offsets), bf16 cache and gamma."""
    pb = _batch(16, dtype=torch.bfloat16, fill_new_tokens=True)
    kv = pb.kv.replace(max_seq_length=None)
    ref = _twin(pb)
    gamma = (1 + 0.1 * _randn(64, seed=4)).to(torch.bfloat16)
    ops.rms_norm_key_cache(kv, gamma, 1e-6, 0, pb.input_row_offsets, 64, backend="triton")
    ops.rms_norm_key_cache(ref, gamma, 1e-6, 0, pb.input_row_offsets, 64, backend="reference")
    # both compute in float32 from the same bf16 rows: at most one bf16 rounding apart
    assert_close(kv.blocks.float(), ref.blocks.float(), atol=0, rtol=2 ** -7, name="blocks")


@pytest.mark.parametrize("page_size,interleaved", [pytest.param(p, i, id=f"ps{p}-{'inter' if i else 'halves'}")
                                                   for p in (1, 3, 16) for i in (True, False)])
def test_rope(page_size, interleaved):
    pb = _batch(page_size, fill_new_tokens=True)
    ref = _twin(pb)
    heads, rope_dim = 3, 16
    # q as a strided view of a wider projection, as a model slices it
    q_full = _randn(pb.num_rows, heads, 48, seed=5)
    q = q_full[..., 32:]
    freqs = _randn(max(pb.totals) + 2, rope_dim, seed=6)
    out = torch.full_like(q, float("nan"))
    got = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, pb.kv, freqs, 1, interleaved, output=out,
                                   backend="triton")
    want = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, ref, freqs, 1, interleaved, backend="reference")
    assert got is out
    assert_close(got, want, atol=ATOL32, rtol=1e-5, name="q_out")
    _check_blocks(pb.kv.blocks, ref.blocks)


def test_rope_in_place_on_q():
    """output may alias q_rope (in-place rope of q)."""
    pb = _batch(16, fill_new_tokens=True)
    ref = _twin(pb)
    q = _randn(pb.num_rows, 2, 16, seed=7)
    freqs = _randn(max(pb.totals) + 1, 16, seed=8)
    want = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, ref, freqs, 0, True, backend="reference")
    got = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, pb.kv, freqs, 0, True, output=q, backend="triton")
    assert_close(got, want, atol=ATOL32, rtol=1e-5, name="q_out")


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_rope_into_the_rope_columns_of_a_wider_q(backend):
    """output may be a strided view: the rope columns of the decode's q, `q[..., latent:]` (docs/layout.md), with
    the latent columns left as they were."""
    pb = _batch(16, fill_new_tokens=True)
    ref = _twin(pb)
    q_full = _randn(pb.num_rows, 2, 48, seed=10)
    before = q_full.clone()
    q_rope = _randn(pb.num_rows, 2, 16, seed=11)
    freqs = _randn(max(pb.totals) + 1, 16, seed=12)
    want = ops.fused_qk_rope_ragged(q_rope, pb.input_row_offsets, ref, freqs, 0, True, backend="reference")
    got = ops.fused_qk_rope_ragged(q_rope, pb.input_row_offsets, pb.kv, freqs, 0, True, output=q_full[..., 32:],
                                   backend=backend)
    assert got.data_ptr() == q_full[..., 32:].data_ptr()
    assert_close(q_full[..., 32:], want, atol=ATOL32, rtol=1e-5, name="q_out")
    assert torch.equal(q_full[..., :32], before[..., :32])
    _check_blocks(pb.kv.blocks, ref.blocks)


def test_deepseek_sizes_write_chain():
    """576-column rows: k projection, RMS norm of the 512 latent columns, rope of the last 64 (few tokens)."""
    lengths = ([0, 5, 1], [3, 0, 2])
    pb = _batch(16, head_size=576, lengths=lengths)
    ref = _twin(pb)
    x = _randn(pb.num_rows, 64, seed=9)
    w = _randn(576, 64, seed=10, scale=0.2)
    gamma = 1 + 0.1 * _randn(512, seed=11)
    freqs = _randn(16, 64, seed=12)
    q = _randn(pb.num_rows, 2, 64, seed=13)
    outs = []
    for kv, backend in ((pb.kv, "triton"), (ref, "reference")):
        ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv, 1, backend=backend)
        ops.rms_norm_key_cache(kv, gamma, 1e-6, 1, pb.input_row_offsets, 512, backend=backend)
        outs.append(ops.fused_qk_rope_ragged(q, pb.input_row_offsets, kv, freqs, 1, True, backend=backend))
    assert_close(outs[0], outs[1], atol=ATOL32, rtol=1e-5, name="q_out")
    _check_blocks(pb.kv.blocks, ref.blocks)


# ---- gpu tier: DeepSeek-V3 sizes -------------------------------------------------------------------------------


# test parameters: the heuristic's config on a batch of 16384 new rows (stream-K) and of 4096 (tail_in_main)
_BIG_BATCH = "16384 rows, heuristic"
_MID_BATCH = "4096 rows, heuristic"


def _gpu_batch(page_size, dtype=torch.bfloat16, fill=False):
    cached = [0, 0, 1, page_size - 1 if page_size > 1 else 2, 700, 129]
    new = [0, 1, 300, page_size + 1, 1, 64]
    return _batch(page_size, head_size=576, dtype=dtype, device="cuda", fill_new_tokens=fill, lengths=(cached, new))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,config", [pytest.param(p, None, id=f"ps{p}") for p in (1, 64, 128)]
                         + [pytest.param(64, MatmulToCacheConfig(tma=True), id="ps64-tma"),
                            pytest.param(64, MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, num_warps=8,
                                                                 num_stages=3, tma=True, tail_block_n=64,
                                                                 tail_split_k=4), id="ps64-tma-tail-split4"),
                            pytest.param(1, MatmulToCacheConfig(block_m=64, block_n=64, block_k=128, group_m=1,
                                                                split_k=8), id="ps1-split8"),
                            pytest.param(64, MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, num_warps=8,
                                                                 num_stages=4, tma=True, tail_block_n=64,
                                                                 stream_workers=132), id="ps64-tma-stream132"),
                            pytest.param(64, _BIG_BATCH, id="ps64-16384-rows-heuristic-stream"),
                            pytest.param(128, _MID_BATCH, id="ps128-4096-rows-heuristic-tail-in-main"),
                            pytest.param(64, MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, num_warps=4,
                                                                 num_stages=5, tma=True, tail_block_n=64,
                                                                 tail_in_main=True), id="ps64-tma-tail-in-main"),
                            pytest.param(1, MatmulToCacheConfig(block_m=128, block_n=128, block_k=64, num_warps=8,
                                                                num_stages=3, tail_block_n=64, tail_in_main=True),
                                         id="ps1-pointers-tail-in-main"),
                            pytest.param(64, MatmulToCacheConfig(block_n=64, tma=True, stream_workers=132),
                                         id="ps64-tma-stream132-one-part"),
                            pytest.param(1, MatmulToCacheConfig(stream_workers=7), id="ps1-stream7"),
                            pytest.param(128, MatmulToCacheConfig(split_k=5, tail_block_n=32, tail_split_k=3),
                                         id="ps128-split5-no-tail")])
def test_gpu_k_matmul_deepseek(page_size, config):
    """The heuristic's default (K split in 4 at these 366 rows) and named tail/split configs. The 128 x 64
    config has no tail at 576 columns, so its tail settings are unused. Split tiles are summed in piece order,
    so repeated calls give the same bits."""
    if config in (_BIG_BATCH, _MID_BATCH):
        # 16384 / 4096 new rows in four sequences with cached prefixes: the heuristic's stream-K / tail_in_main
        new = [5000, 1, 6000, 5383] if config is _BIG_BATCH else [1000, 1, 2000, 1095]
        pb = _batch(page_size, head_size=576, dtype=torch.bfloat16, device="cuda",
                    lengths=([0, 100, 3000, 7], new))
        props = torch.cuda.get_device_properties(0)
        chosen = matmul_to_cache_heuristic(pb.num_rows, 576, 7168, num_sms=props.multi_processor_count,
                                           shared_memory=props.shared_memory_per_block_optin)
        assert chosen.stream_workers > 0 if config is _BIG_BATCH else chosen.tail_in_main, chosen
        config = None
    else:
        pb = _gpu_batch(page_size)
    ref, low = _twin(pb, torch.float32), _twin(pb, torch.float32)
    x = _randn(pb.num_rows, 7168, dtype=torch.bfloat16, device="cuda")
    w = _randn(576, 7168, dtype=torch.bfloat16, device="cuda", seed=2, scale=7168 ** -0.5)
    kv = pb.kv
    _triton_cache_write.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths,
                                              kv.lookup_table, 1, config)
    first = kv.blocks.clone()
    for _ in range(3):
        # best effort: hand the next call's partial workspace memory that holds NaN, so a partial read before its
        # piece stored it would show
        del_me = torch.full((1 << 24,), float("nan"), device="cuda")
        del del_me
        _triton_cache_write.k_matmul_ragged_paged(x, pb.input_row_offsets, w, kv.blocks, kv.cache_lengths,
                                                  kv.lookup_table, 1, config)
        assert torch.equal(first.view(torch.int16), kv.blocks.view(torch.int16)), "a repeated call changed bits"
    ops.k_matmul_ragged_paged(x, pb.input_row_offsets, w, ref, 1, backend="reference")
    eye = torch.eye(576, device="cuda")
    ops.k_matmul_ragged_paged((x @ w.T).float(), pb.input_row_offsets, eye, low, 1, backend="reference")
    # float32 accumulation of 7168 products (tensor cores truncate while accumulating): the probabilistic bound
    # sqrt(K) * 2^-24 * sum|x_k w_k| on top of 2x PyTorch's error. Near-zero outputs, whose bf16 step is finer
    # than that, were seen one step off on the H200 (e.g. -0.00383 for -0.0038452).
    eps = 7168 ** 0.5 * 2.0 ** -24 * float((x.float().abs() @ w.float().abs().T).max())
    _check_blocks(pb.kv.blocks, ref.blocks, low.blocks, eps=eps)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [pytest.param(p, id=f"ps{p}") for p in (1, 64, 128)])
def test_gpu_rms_norm_and_rope_deepseek(page_size):
    """Each op on its own copy of the cache, so every compared value went through one bf16 rounding."""
    pb = _gpu_batch(page_size, fill=True)
    gamma = (1 + 0.1 * _randn(512, seed=4)).to(torch.bfloat16).cuda()
    freqs = _randn(1024, 64, seed=6, device="cuda")
    q = _randn(pb.num_rows, 128, 64, dtype=torch.bfloat16, device="cuda", seed=7)
    # the same float32 math from the same bf16 inputs: at most one bf16 rounding apart
    close = dict(atol=1e-6, rtol=2 ** -7)
    got, want = _twin(pb), _twin(pb)
    ops.rms_norm_key_cache(got, gamma, 1e-6, 1, pb.input_row_offsets, 512, backend="triton")
    ops.rms_norm_key_cache(want, gamma, 1e-6, 1, pb.input_row_offsets, 512, backend="reference")
    assert_close(got.blocks.float(), want.blocks.float(), name="blocks after rms_norm", **close)
    for interleaved in (True, False):
        got, want = _twin(pb), _twin(pb)
        q_got = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, got, freqs, 1, interleaved, backend="triton")
        q_want = ops.fused_qk_rope_ragged(q, pb.input_row_offsets, want, freqs, 1, interleaved,
                                          backend="reference")
        assert_close(q_got.float(), q_want.float(), name=f"q_out (interleaved={interleaved})", **close)
        assert_close(got.blocks.float(), want.blocks.float(), name=f"blocks after rope ({interleaved})", **close)
