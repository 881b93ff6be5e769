"""Sparse (top-k) MLA decode for groups of up to 16 rows (16 heads or fewer, one query token), in Gluon: the
key rows are gathered into a ring of shared-memory slots ahead of the math, with no load from memory on the
loop's critical path.

Why. The Triton sparse kernel (`pagedmla.kernels.mla_sparse_decode`) leaves its gathers to the compiler's
pipeliner, which issues a block's copies right after the load of that block's indices, so each block's
gathers wait on a global load and few bytes are in flight (63% of the copy ceiling at the 16-head V3.2 shape;
benchmarks/gather_probe.py reads the same random 1152-byte rows at 4 TB/s when enough are in flight). Here the
program issues the asynchronous copies (`cp.async`, no registers held) itself, and the index entries travel
the same way, one ring depth ahead of the rows they name. A first version that loaded each block's indices
into registers an iteration ahead ran at one block per index-load latency: 170 us against 91.5 with the index
ring (5 slots, H200, B64, 2 query tokens, topk 2048; benchmarks/results/session-11/).

Work decomposition (as the Triton kernel's, without `fold_shared_index`): program (token, split) owns the token's
`num_heads` rows (padded to 16) and the split's share of the token's 32-key index blocks. The ring has NUM_SLOTS
slots of one block each (latent `[32, 512]` and rope `[32, 64]` tiles); at 2 slots a program takes 92 KB of
shared memory and two share an SM. Copy group t holds block lo + t's rows and the index entries of block
lo + t + NUM_SLOTS - 1 (the kernel's docstring has the schedule). Entries that are -1, outside the pool or past
`topk_lengths[b]` copy as zero rows and are masked in S.

Math (4 warps, `mma.sync` 16x8x16; each warp owns 8 keys of S and 128 output columns): the logits are five
independent MMA chains (four 128-column latent chunks and the rope part, summed afterwards) instead of one chain
of 36; q's latent part is read from shared memory per block (in registers it would not leave room for the rest).
The row sums stay per key column until the end, so the block's only cross-warp steps are the row max and
handing P to every warp. With one split a program finishes its rows (sink, normalization); with several it
writes a normalized partial and its LSE in the Triton kernel's layout, and
`mla_sparse_decode._mla_sparse_decode_combine_kernel` merges them.

The rope-aware FP8 row (with a bf16 q): the slot holds the raw e4m3 latent, the bf16 rope columns and the
rows' scales; before its MMAs the block's latent is widened to bf16 into one more shared tile (exactly, with
`pagedmla.kernels.fp8`'s conversion), and the row's scale multiplies the latent logits and P's column. The
widening makes this path bound by its math, not by its bytes.

Scope (the launcher checks it, else the Triton kernel runs): a Hopper GPU; q and cache both bf16 or both fp16,
or a bf16 q with the rope-aware FP8 cache; DeepSeek's 512 + 64 dims; at most 16 heads; one query token per
group; the main index stream only.
Softmax runs in base 2 on logits pre-multiplied by `scale * log2(e)`; LSEs leave the kernel in natural log.

The ring machinery (`_ring_buffers`, `_ring_prologue`, `_ring_loop`, the epilogue helpers) is shared with the
dense kernel `pagedmla.kernels.mla_decode_ring`, whose entries are pages of the lookup table (`DENSE`: the
`_dense_*` helpers); with `DENSE` False it compiles to the code this kernel had before the sharing.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

from .fp8 import E4M3X4_TO_BF16_ASM
from .gluon_common import LN2, LOG2E, wait_for_prior_grid

BLOCK_M = gl.constexpr(16)
BLOCK_N = gl.constexpr(32)
D_LAT = gl.constexpr(512)
D_ROPE = gl.constexpr(64)
CHUNK = gl.constexpr(128)  # latent columns per logits chain and per output accumulator
SEARCH_BLOCK = gl.constexpr(128)


@gluon.constexpr_function
def _mma():
    """Accumulator layout of S `[16, 32]` and of the output chunks `[16, 128]`: warps side by side along N."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4], instr_shape=[16, 8])


@gluon.constexpr_function
def _smem():
    """Shared layout of q and of the ring's tiles (2-D, or 3-D with a leading slot index): 16-byte vectors,
    swizzled so that ldmatrix reads them in either orientation without bank conflicts."""
    return gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])


@gluon.constexpr_function
def _smem8():
    """Shared layout of the e4m3 latent tiles: 16-byte vectors (16 values), swizzled like `_smem`."""
    return gl.SwizzledSharedLayout(vec=16, per_phase=1, max_phase=8, order=[1, 0])


@gluon.constexpr_function
def _ring_layout(fp8):
    return _smem8() if fp8 else _smem()


@gluon.constexpr_function
def _lat_copy():
    """Copies of a block's latent rows `[32, 512]`: 16 bytes per thread, a warp per row."""
    return gl.BlockedLayout([1, 8], [1, 32], [4, 1], [1, 0])


@gluon.constexpr_function
def _lat8_copy():
    """Copies of a block's e4m3 latent rows `[32, 512]` (the rope-aware FP8 row): 16 bytes per thread."""
    return gl.BlockedLayout([1, 16], [1, 32], [4, 1], [1, 0])


@gluon.constexpr_function
def _widen_layout():
    """Widening a slot's e4m3 latent `[32, 512]` to bf16: 16 consecutive values per thread."""
    return gl.BlockedLayout([1, 16], [2, 16], [4, 1], [1, 0])


@gluon.constexpr_function
def _rope_copy():
    """Copies of a block's rope columns `[32, 64]` (and of q's rows): 16 bytes per thread."""
    return gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])


@gluon.jit
def _sequence_of(offsets_ptr, tok, batch):
    """The sequence holding query row `tok`: how many sequences end at or before it (one vector load per 128
    sequences, instead of a binary search's chain of dependent loads)."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    b = 0
    base = 0
    while base < batch:
        nxt = base + 1 + gl.arange(0, SEARCH_BLOCK, layout)
        ends = gl.load(offsets_ptr + nxt, mask=nxt <= batch, other=2147483647)
        b += gl.sum((ends <= tok).to(gl.int32), axis=0)
        base += SEARCH_BLOCK
    return b


@gluon.constexpr_function
def _idx_copy():
    """Copies of a block's 32 index entries (4 bytes each; the four warps copy the same entries)."""
    return gl.BlockedLayout([1], [32], [4], [0])


@gluon.jit
def _rows(idx, keys, count, pool_rows):
    """(cache row of each key, whether it is a key): -1, out-of-pool entries and keys at or past `count` are no
    key (row 0, never read)."""
    ok = (keys < count) & (idx >= 0) & (idx < pool_rows)
    return gl.where(ok, idx, 0), ok


@gluon.jit
def _entry_ptrs(idx_row, stride_idx_k, keys, DENSE: gl.constexpr, PAGE_SIZE: gl.constexpr):
    """Addresses of the keys' entries: in the index row (sparse), or in the sequence's lookup-table row (DENSE,
    one entry per page)."""
    if DENSE:
        return idx_row + keys // PAGE_SIZE
    else:
        return idx_row + keys.to(gl.int64) * stride_idx_k


@gluon.jit
def _load_rows(idx_row, stride_idx_k, block, count, pool_rows, layout: gl.constexpr):
    """Index block `block`'s rows loaded from memory in `layout` (1-D): the prologue's blocks."""
    keys = block * BLOCK_N + gl.arange(0, BLOCK_N, layout)
    idx = gl.load(idx_row + keys.to(gl.int64) * stride_idx_k, mask=keys < count, other=-1)
    return _rows(idx, keys, count, pool_rows)


@gluon.jit
def _ring_rows(idx_s, block, count, pool_rows, NUM_IDX: gl.constexpr, layout: gl.constexpr):
    """Index block `block`'s rows from its slot of the index ring, in `layout` (1-D)."""
    keys = block * BLOCK_N + gl.arange(0, BLOCK_N, layout)
    return _rows(idx_s.index(block % NUM_IDX).load(layout), keys, count, pool_rows)


@gluon.jit
def _copy_index_block(idx_s, idx_row, stride_idx_k, block, count, NUM_IDX: gl.constexpr, DENSE: gl.constexpr,
                      PAGE_SIZE: gl.constexpr):
    """Asynchronous copy of index block `block`'s entries into its slot of the index ring (entries at or past
    `count` are not read)."""
    keys = block * BLOCK_N + gl.arange(0, BLOCK_N, _idx_copy())
    async_copy.async_copy_global_to_shared(idx_s.index(block % NUM_IDX),
                                           _entry_ptrs(idx_row, stride_idx_k, keys, DENSE, PAGE_SIZE),
                                           mask=keys < count)


@gluon.jit
def _row_offset(idx, layer_off, stride_b, stride_s, PAGE_SIZE: gl.constexpr):
    """Element offset of cache row `idx` (page idx // PAGE_SIZE, slot idx % PAGE_SIZE) in this layer."""
    return (idx // PAGE_SIZE).to(gl.int64) * stride_b + layer_off + (idx % PAGE_SIZE).to(gl.int64) * stride_s


@gluon.jit
def _issue_tile(dst, ptr, rows, ok, layer_off, stride_b, stride_s, col0, WIDTH: gl.constexpr, PAGE_SIZE: gl.constexpr,
                layout: gl.constexpr):
    """Asynchronous copy of columns `[col0, col0 + WIDTH)` of cache rows `rows` into the `[32, WIDTH]` tile `dst`
    (`layout`: its copy layout); zeros for rows that are no key (`ok` False)."""
    cols = col0 + gl.arange(0, WIDTH, gl.SliceLayout(0, layout))
    off = _row_offset(rows, layer_off, stride_b, stride_s, PAGE_SIZE)
    async_copy.async_copy_global_to_shared(dst, ptr + off[:, None] + cols[None, :], mask=ok[:, None])


@gluon.constexpr_function
def _lat_layout(fp8):
    return _lat8_copy() if fp8 else _lat_copy()


@gluon.jit
def _rows_in(idx_s, idx_row, stride_idx_k, block, count, pool_rows, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr,
             layout: gl.constexpr):
    """Index block `block`'s rows in `layout`: from the index ring, or (the prologue) loaded from memory."""
    if FROM_RING:
        return _ring_rows(idx_s, block, count, pool_rows, NUM_IDX, layout)
    else:
        return _load_rows(idx_row, stride_idx_k, block, count, pool_rows, layout)


@gluon.jit
def _dense_page(idx_s, table_row, block, count, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr,
                PAGE_SIZE: gl.constexpr):
    """The page of block `block` when the page size is a multiple of the block (one page per block), as a
    scalar: from the index ring (its first entry) or (the prologue) loaded from the table; -1 past `count`."""
    if FROM_RING:
        one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        return gl.max(idx_s.index(block % NUM_IDX).slice(0, 1).load(one), axis=0)
    else:
        return gl.load(table_row + (block * BLOCK_N) // PAGE_SIZE, mask=block * BLOCK_N < count, other=-1)


@gluon.jit
def _dense_rows(idx_s, table_row, block, key_lo, count, pool_pages, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr,
                layout: gl.constexpr, PAGE_SIZE: gl.constexpr):
    """The dense kernel's (page, slot, is a key) of block `block`'s keys in `layout` (1-D): the pages are the
    keys' lookup-table entries, from the index ring or (the prologue) loaded from memory. Keys outside
    `[key_lo, count)` and entries outside `[0, pool_pages)` are no key (page 0, never read). When the page size
    is a multiple of the block, the block is one run of slots of one page, whose entry is read once (a scalar):
    no division per key, and the copies' addresses are a base plus per-row constants, so they issue early."""
    r = gl.arange(0, BLOCK_N, layout)
    keys = block * BLOCK_N + r
    in_range = (keys >= key_lo) & (keys < count)
    if PAGE_SIZE % BLOCK_N == 0:
        page = _dense_page(idx_s, table_row, block, count, NUM_IDX, FROM_RING, PAGE_SIZE)
        page_ok = (page >= 0) & (page < pool_pages)
        return gl.where(page_ok, page, 0), (block * BLOCK_N) % PAGE_SIZE + r, in_range & page_ok
    else:
        if FROM_RING:
            page = idx_s.index(block % NUM_IDX).load(layout)
        else:
            page = gl.load(table_row + keys // PAGE_SIZE, mask=keys < count, other=-1)
        ok = in_range & (page >= 0) & (page < pool_pages)
        return gl.where(ok, page, 0), keys % PAGE_SIZE, ok


@gluon.jit
def _dense_offset(page, slot, layer_off, stride_b, stride_s):
    """Element offset of (page, slot) in this layer."""
    return page.to(gl.int64) * stride_b + layer_off + slot.to(gl.int64) * stride_s


@gluon.jit
def _copy_rows(dst, ptr, off, ok, col0, WIDTH: gl.constexpr, layout: gl.constexpr):
    """Asynchronous copy of columns `[col0, col0 + WIDTH)` of the rows at element offsets `off` into the
    `[32, WIDTH]` tile `dst` (`layout`: its copy layout); zeros for rows that are no key (`ok` False)."""
    cols = col0 + gl.arange(0, WIDTH, gl.SliceLayout(0, layout))
    async_copy.async_copy_global_to_shared(dst, ptr + off[:, None] + cols[None, :], mask=ok[:, None])


@gluon.jit
def _copy_dense_block(lat_s, rope_s, sc_s, slot, idx_s, table_row, block, key_lo, count, pool_pages, blocks_ptr,
                      rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b, stride_s, stride_r_b,
                      stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr,
                      FP8: gl.constexpr, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr):
    """`_copy_block` for the dense kernel: block `block` of a sequence's keys (pages from its table row)."""
    lat_layout: gl.constexpr = _lat_layout(FP8)
    page_l, slot_l, ok_l = _dense_rows(idx_s, table_row, block, key_lo, count, pool_pages, NUM_IDX, FROM_RING,
                                       gl.SliceLayout(1, lat_layout), PAGE_SIZE)
    _copy_rows(lat_s.index(slot), blocks_ptr, _dense_offset(page_l, slot_l, layer_off, stride_b, stride_s), ok_l, 0,
               D_LAT, lat_layout)
    page_r, slot_r, ok_r = _dense_rows(idx_s, table_row, block, key_lo, count, pool_pages, NUM_IDX, FROM_RING,
                                       gl.SliceLayout(1, _rope_copy()), PAGE_SIZE)
    if FP8:
        _copy_rows(rope_s.index(slot), rope_ptr, _dense_offset(page_r, slot_r, r_layer_off, stride_r_b, stride_r_s),
                   ok_r, ROPE_OFF, D_ROPE, _rope_copy())
        page_s, slot_s, ok_s = _dense_rows(idx_s, table_row, block, key_lo, count, pool_pages, NUM_IDX, FROM_RING,
                                           _idx_copy(), PAGE_SIZE)
        async_copy.async_copy_global_to_shared(
            sc_s.index(slot), scales_ptr + _dense_offset(page_s, slot_s, s_layer_off, stride_s_b, stride_s_s),
            mask=ok_s)
    else:
        _copy_rows(rope_s.index(slot), blocks_ptr, _dense_offset(page_r, slot_r, layer_off, stride_b, stride_s),
                   ok_r, D_LAT, D_ROPE, _rope_copy())


@gluon.jit
def _copy_block(lat_s, rope_s, sc_s, slot, idx_s, idx_row, stride_idx_k, block, key_lo, count, pool_rows,
                blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b, stride_s,
                stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr,
                FP8: gl.constexpr, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr, DENSE: gl.constexpr):
    """Asynchronous copies of index block `block`'s rows into ring slot `slot`: the latent tile (e4m3 for the
    rope-aware FP8 row), the rope tile and, for FP8, the rows' scales. DENSE: `_copy_dense_block` (`key_lo`
    is only the dense kernel's)."""
    if DENSE:
        _copy_dense_block(lat_s, rope_s, sc_s, slot, idx_s, idx_row, block, key_lo, count, pool_rows, blocks_ptr,
                          rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b, stride_s, stride_r_b,
                          stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE, ROPE_OFF, FP8, NUM_IDX, FROM_RING)
    else:
        _copy_sparse_block(lat_s, rope_s, sc_s, slot, idx_s, idx_row, stride_idx_k, block, count, pool_rows,
                           blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b, stride_s,
                           stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE, ROPE_OFF, FP8, NUM_IDX,
                           FROM_RING)


@gluon.jit
def _copy_sparse_block(lat_s, rope_s, sc_s, slot, idx_s, idx_row, stride_idx_k, block, count, pool_rows,
                       blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b, stride_s,
                       stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE: gl.constexpr,
                       ROPE_OFF: gl.constexpr, FP8: gl.constexpr, NUM_IDX: gl.constexpr, FROM_RING: gl.constexpr):
    """`_copy_block` of the sparse kernel: block `block` of a token's index row."""
    lat_layout: gl.constexpr = _lat_layout(FP8)
    # every copy layout's rows first, then the copies
    rows_l, ok_l = _rows_in(idx_s, idx_row, stride_idx_k, block, count, pool_rows, NUM_IDX, FROM_RING,
                            gl.SliceLayout(1, lat_layout))
    rows_r, ok_r = _rows_in(idx_s, idx_row, stride_idx_k, block, count, pool_rows, NUM_IDX, FROM_RING,
                            gl.SliceLayout(1, _rope_copy()))
    _issue_tile(lat_s.index(slot), blocks_ptr, rows_l, ok_l, layer_off, stride_b, stride_s, 0, D_LAT, PAGE_SIZE,
                lat_layout)
    if FP8:
        _issue_tile(rope_s.index(slot), rope_ptr, rows_r, ok_r, r_layer_off, stride_r_b, stride_r_s, ROPE_OFF,
                    D_ROPE, PAGE_SIZE, _rope_copy())
        rows_s, ok_s = _rows_in(idx_s, idx_row, stride_idx_k, block, count, pool_rows, NUM_IDX, FROM_RING,
                                _idx_copy())
        off = _row_offset(rows_s, s_layer_off, stride_s_b, stride_s_s, PAGE_SIZE)
        async_copy.async_copy_global_to_shared(sc_s.index(slot), scales_ptr + off, mask=ok_s)
    else:
        # the rope columns are the same rows' columns [512, 576), through the latent copy's pointer and strides.
        # With the rows loaded before the copies, this keeps the sm_90a code f84b55a was measured with; a version
        # that interleaved them and read the rope through a second pointer ran 5-8% slower (ab-ring-2ba1cfa.txt)
        _issue_tile(rope_s.index(slot), blocks_ptr, rows_r, ok_r, layer_off, stride_b, stride_s, D_LAT, D_ROPE,
                    PAGE_SIZE, _rope_copy())


@gluon.jit
def _widen(raw, lat_bf):
    """A slot's e4m3 latent tile as bf16 into `lat_bf`, exactly (`pagedmla.kernels.fp8._e4m3_to_bf16`)."""
    x = raw.load(_widen_layout())
    lat_bf.store(gl.inline_asm_elementwise(E4M3X4_TO_BF16_ASM, "=r,=r,r", [x.to(gl.uint8, bitcast=True)],
                                           dtype=gl.bfloat16, is_pure=True, pack=4))


@gluon.jit
def _logits(q_s, q_rope, lat, rope, s_ok, sc, qk_scale, SCALED: gl.constexpr):
    """Scaled, masked logits S `[16, 32]` of one ring slot: five independent MMA chains, then summed (SCALED:
    the latent part's chains times each key's scale `sc`). The rope chain goes first, so that its latency
    overlaps the latent chains'."""
    layout: gl.constexpr = _mma()
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=layout, k_width=2)
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
    s = mma_v2(q_rope, rope.permute((1, 0)).load(b_op), zero)
    if SCALED:
        s_lat = zero
        for c in gl.static_range(D_LAT // CHUNK):
            q_c = q_s.slice(c * CHUNK, CHUNK, dim=1).load(a_op)
            s_lat += mma_v2(q_c, lat.slice(c * CHUNK, CHUNK, dim=1).permute((1, 0)).load(b_op), zero)
        s += s_lat * sc[None, :]
    else:
        for c in gl.static_range(D_LAT // CHUNK):
            q_c = q_s.slice(c * CHUNK, CHUNK, dim=1).load(a_op)
            s += mma_v2(q_c, lat.slice(c * CHUNK, CHUNK, dim=1).permute((1, 0)).load(b_op), zero)
    return gl.where(s_ok[None, :], s * qk_scale, float("-inf"))


@gluon.jit
def _pv(p_op, lat, c: gl.constexpr, acc, alpha):
    """Output chunk c `[16, 128]`: rescaled by alpha, plus P @ V over the slot's latent columns of the chunk."""
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=_mma(), k_width=2)
    return mma_v2(p_op, lat.slice(c * CHUNK, CHUNK, dim=1).load(b_op), acc * alpha[:, None])


@gluon.jit
def _store_chunk(ptr, row_off, c: gl.constexpr, acc, scale, rows_ok, KEEP: gl.constexpr):
    """Row-scaled output chunk c to `ptr + row_off[row] + column` (converted to the pointer's dtype); KEEP: see
    `_store_rows`."""
    layout: gl.constexpr = _mma()
    cols = c * CHUNK + gl.arange(0, CHUNK, gl.SliceLayout(0, layout))
    val = (acc * scale[:, None]).to(ptr.dtype.element_ty)
    if KEEP:
        gl.store(ptr + row_off[:, None] + cols[None, :], val, mask=rows_ok[:, None], eviction_policy="evict_last")
    else:
        gl.store(ptr + row_off[:, None] + cols[None, :], val, mask=rows_ok[:, None])


@gluon.jit
def _ring_buffers(q_ptr, blocks_ptr, NUM_SLOTS: gl.constexpr):
    """The program's shared memory: the ring's latent, rope and (FP8) scale tiles, the widened latent of the
    slot being computed (FP8), q's latent and rope rows, and the index ring of 2 * NUM_SLOTS blocks' entries.
    Without FP8 the scale and widened tiles are the latent ring (never read as such)."""
    dtype: gl.constexpr = q_ptr.dtype.element_ty
    FP8: gl.constexpr = blocks_ptr.dtype.element_ty == gl.float8e4nv
    lat_s = gl.allocate_shared_memory(blocks_ptr.dtype.element_ty, [NUM_SLOTS, BLOCK_N, D_LAT], _ring_layout(FP8))
    rope_s = gl.allocate_shared_memory(dtype, [NUM_SLOTS, BLOCK_N, D_ROPE], _smem())
    if FP8:
        sc_s = gl.allocate_shared_memory(gl.float32, [NUM_SLOTS, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        # the slot being computed, widened to bf16
        lat_bf = gl.allocate_shared_memory(dtype, [BLOCK_N, D_LAT], _smem())
    else:
        sc_s = lat_s
        lat_bf = lat_s
    q_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D_LAT], _smem())
    qr_s = gl.allocate_shared_memory(dtype, [BLOCK_M, D_ROPE], _smem())
    idx_s = gl.allocate_shared_memory(gl.int32, [2 * NUM_SLOTS, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    return lat_s, rope_s, sc_s, lat_bf, q_s, qr_s, idx_s


@gluon.jit
def _ring_prologue(lat_s, rope_s, sc_s, idx_s, idx_row, stride_idx_k, lo, hi, key_lo, count, pool, blocks_ptr,
                   rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b_b, stride_b_s, stride_r_b, stride_r_s,
                   stride_s_b, stride_s_s, PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, NUM_SLOTS: gl.constexpr,
                   DENSE: gl.constexpr):
    """The copy groups 0 to NUM_SLOTS - 2 of blocks `[lo, hi)` (`_ring_loop` has the schedule); a block past hi
    copies nothing, its group still counts. The prologue's rows come from entries loaded from memory. `key_lo`:
    the dense kernel's first key (keys below it are no key)."""
    FP8: gl.constexpr = blocks_ptr.dtype.element_ty == gl.float8e4nv
    NUM_IDX: gl.constexpr = 2 * NUM_SLOTS
    for i in gl.static_range(NUM_SLOTS - 1):
        _copy_block(lat_s, rope_s, sc_s, i, idx_s, idx_row, stride_idx_k, lo + i, key_lo,
                    gl.where(lo + i < hi, count, 0), pool, blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b_b,
                    stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE, ROPE_OFF, FP8, NUM_IDX,
                    False, DENSE)
        _copy_index_block(idx_s, idx_row, stride_idx_k, lo + i, gl.where(lo + i < hi, count, 0), NUM_IDX, DENSE,
                          PAGE_SIZE)
        ahead = lo + i + NUM_SLOTS - 1
        _copy_index_block(idx_s, idx_row, stride_idx_k, ahead, gl.where(ahead < hi, count, 0), NUM_IDX, DENSE,
                          PAGE_SIZE)
        async_copy.commit_group()


@gluon.jit
def _ring_loop(q_s, q_rope, lat_s, rope_s, sc_s, lat_bf, idx_s, idx_row, stride_idx_k, lo, hi, key_lo, count, pool,
               blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off, s_layer_off, stride_b_b, stride_b_s,
               stride_r_b, stride_r_s, stride_s_b, stride_s_s, qk_scale, mask_rows, vis_lo, vis_hi,
               PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, NUM_SLOTS: gl.constexpr, DENSE: gl.constexpr):
    """Online softmax of the rows of q (`q_s`, `q_rope`) over blocks `[lo, hi)` of the entries at `idx_row`
    (keys at or past `count` are no key), after `_ring_prologue`: (four output chunks, m, per-column row sums),
    every copy waited for. DENSE: keys below `key_lo` are no key either, and when `mask_rows` (rows of several
    query tokens) S is also masked by each row's visible keys `[vis_lo, vis_hi)`.

    Copy group t (t < NUM_SLOTS - 1: the prologue's; else issued in iteration t - NUM_SLOTS + 1) holds the rows
    of block lo + t and the entries of block lo + t + NUM_SLOTS - 1, so once iteration t has waited for group t,
    both block lo + t's rows and the entries of the block whose rows it issues next are in shared memory: no
    global load sits on the loop's critical path. The index ring keeps 2 * NUM_SLOTS blocks' entries (those
    from the block being computed to the last one copied)."""
    layout: gl.constexpr = _mma()
    dtype: gl.constexpr = q_s.dtype
    FP8: gl.constexpr = blocks_ptr.dtype.element_ty == gl.float8e4nv
    NUM_IDX: gl.constexpr = 2 * NUM_SLOTS
    key_l: gl.constexpr = gl.SliceLayout(0, layout)
    acc0 = gl.zeros([BLOCK_M, CHUNK], gl.float32, layout)
    acc1 = gl.zeros([BLOCK_M, CHUNK], gl.float32, layout)
    acc2 = gl.zeros([BLOCK_M, CHUNK], gl.float32, layout)
    acc3 = gl.zeros([BLOCK_M, CHUNK], gl.float32, layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, gl.SliceLayout(1, layout))
    l_cols = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
    p_op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2)
    for j in range(lo, hi):
        async_copy.wait_group(NUM_SLOTS - 2)
        gl.thread_barrier()
        # block j + NUM_SLOTS - 1's rows into the slot block j - 1 used, and the entries of the block after
        nxt = j + NUM_SLOTS - 1
        _copy_block(lat_s, rope_s, sc_s, (j - lo + NUM_SLOTS - 1) % NUM_SLOTS, idx_s, idx_row, stride_idx_k, nxt,
                    key_lo, gl.where(nxt < hi, count, 0), pool, blocks_ptr, rope_ptr, scales_ptr, layer_off, r_layer_off,
                    s_layer_off, stride_b_b, stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE,
                    ROPE_OFF, FP8, NUM_IDX, True, DENSE)
        ahead = nxt + NUM_SLOTS - 1
        _copy_index_block(idx_s, idx_row, stride_idx_k, ahead, gl.where(ahead < hi, count, 0), NUM_IDX, DENSE,
                          PAGE_SIZE)
        async_copy.commit_group()

        if DENSE:
            _, _, s_ok = _dense_rows(idx_s, idx_row, j, key_lo, count, pool, NUM_IDX, True, key_l, PAGE_SIZE)
        else:
            _, s_ok = _ring_rows(idx_s, j, count, pool, NUM_IDX, key_l)
        slot = (j - lo) % NUM_SLOTS
        if FP8:
            _widen(lat_s.index(slot), lat_bf)
            gl.thread_barrier()
            lat = lat_bf
            sc = sc_s.index(slot).load(key_l)
        else:
            lat = lat_s.index(slot)
            sc = qk_scale
        s = _logits(q_s, q_rope, lat, rope_s.index(slot), s_ok, sc, qk_scale, FP8)
        if DENSE:  # noqa: SIM102 (a compile-time test around a runtime one)
            if mask_rows:
                keys = j * BLOCK_N + gl.arange(0, BLOCK_N, key_l)
                vis = (keys[None, :] >= vis_lo[:, None]) & (keys[None, :] < vis_hi[:, None])
                s = gl.where(vis, s, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, axis=1))
        # rows that have seen no key yet keep m = -inf; shift them by 0 so exp2 gives 0, not NaN
        m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = gl.exp2(m_i - m_safe)
        p = gl.exp2(s - m_safe[:, None])
        l_cols = l_cols * alpha[:, None] + p
        m_i = m_new
        if FP8:
            # V is the raw latent: its row scale moves onto P's column
            p = p * sc[None, :]
        p_op = gl.convert_layout(p.to(dtype), p_op_layout)
        acc0 = _pv(p_op, lat, 0, acc0, alpha)
        acc1 = _pv(p_op, lat, 1, acc1, alpha)
        acc2 = _pv(p_op, lat, 2, acc2, alpha)
        acc3 = _pv(p_op, lat, 3, acc3, alpha)
    async_copy.wait_group(0)
    return acc0, acc1, acc2, acc3, m_i, l_cols


@gluon.jit
def _row_lse(m_i, l_cols):
    """(row sums, whether a row saw a key, natural-log LSE: -inf for a row that saw none)."""
    l_i = gl.sum(l_cols, axis=1)
    has = l_i > 0
    lse = gl.where(has, (m_i + gl.log2(gl.where(has, l_i, 1.0))) * LN2, float("-inf"))
    return l_i, has, lse


@gluon.jit
def _finish_scale(l_i, has, m_i, sink_ptr, heads, rows_ok, HAS_SINK: gl.constexpr):
    """1 / the rows' softmax denominators (0 for a row that saw no key); the sink joins the denominator only,
    and a +inf sink gives 0."""
    denom = l_i
    if HAS_SINK:
        sink = gl.load(sink_ptr + heads, mask=rows_ok, other=float("-inf")) * LOG2E
        denom += gl.exp2(sink - gl.where(has, m_i, 0.0))
    return gl.where(has, 1.0 / gl.where(has, denom, 1.0), 0.0)


@gluon.jit
def _store_rows(ptr, row_off, acc0, acc1, acc2, acc3, scale, rows_ok, KEEP: gl.constexpr):
    """The four row-scaled output chunks to `ptr + row_off[row] + column`. KEEP (partial results of a split):
    stored with L2 policy evict_last. H200, 16 heads, back-to-back calls (BENCHMARKS.md, eighteenth session):
    dense B64 N4096 84.2 -> 81.6-81.8 us, sparse B64 (q2, topk 2048) 82.8-83.1 -> 80.8-80.9 us. The decode
    kernel got faster, the combine did not (nor with evict_first on its loads): presumably the workspace, which
    every call writes again, now stays in L2 instead of being written back to memory while the cache streams."""
    _store_chunk(ptr, row_off, 0, acc0, scale, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 1, acc1, scale, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 2, acc2, scale, rows_ok, KEEP)
    _store_chunk(ptr, row_off, 3, acc3, scale, rows_ok, KEEP)


# no recompile when a size becomes 1 or changes its divisibility by 16 (a multi-second compile in the middle of
# serving, or inside a CUDA-graph capture; `stride_pl_s` is tokens x heads), while the strides of the cache and
# of the outputs stay specialized (the 16-byte copies need their divisibility); the page size is a
# compile-time constant (fixed per cache), so that a row id splits into page and slot with shifts
@gluon.jit(do_not_specialize=["batch", "num_heads", "num_splits", "layer_idx", "pool_rows", "topk", "stride_pl_s"])
def _mla_sparse_decode_ring_kernel(
    q_ptr, out_ptr, lse_ptr, part_out_ptr, part_lse_ptr, offsets_ptr, sink_ptr, idx_ptr, topk_len_ptr, blocks_ptr,
    rope_ptr, scales_ptr,
    batch, num_heads, num_splits, layer_idx, qk_scale, pool_rows, topk,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h, stride_lse_t, stride_lse_h, stride_po_s, stride_po_t,
    stride_po_h, stride_pl_s, stride_pl_t, stride_idx_t, stride_idx_k, stride_b_b, stride_b_l, stride_b_s,
    stride_r_b, stride_r_l, stride_r_s, stride_s_b, stride_s_l, stride_s_s,
    PAGE_SIZE: gl.constexpr, ROPE_OFF: gl.constexpr, HAS_SINK: gl.constexpr, SPLIT: gl.constexpr,
    NUM_SLOTS: gl.constexpr,
):
    """Program (token, split): the token's rows against the split's share of its index blocks.

    The cache is `blocks_ptr` (bf16/fp16 rows of 576, or the rope-aware FP8 row: 512 e4m3 bytes, then the rope
    part as bf16), its rope columns `rope_ptr` at ROPE_OFF of each row (the same cache, or its bf16 view), the
    FP8 row's scale column 0 of `scales_ptr` (one per row: it multiplies the latent logits and P's column).
    The copy schedule is `_ring_loop`'s."""
    layout: gl.constexpr = _mma()
    tok = gl.program_id(0)
    split = gl.program_id(1)
    # launched as a programmatic dependent on Hopper: nothing is read or written before the previous kernel is
    # done (see `mla_decode_ring`)
    wait_for_prior_grid(tok)
    lat_s, rope_s, sc_s, lat_bf, q_s, qr_s, idx_s = _ring_buffers(q_ptr, blocks_ptr, NUM_SLOTS)

    b = _sequence_of(offsets_ptr, tok, batch)
    count = gl.minimum(gl.load(topk_len_ptr + b), topk)
    num_blocks = gl.cdiv(count, BLOCK_N)
    lo = split * num_blocks // num_splits
    hi = (split + 1) * num_blocks // num_splits
    idx_row = idx_ptr + tok.to(gl.int64) * stride_idx_t
    layer = layer_idx.to(gl.int64)
    _ring_prologue(lat_s, rope_s, sc_s, idx_s, idx_row, stride_idx_k, lo, hi, 0, count, pool_rows, blocks_ptr,
                   rope_ptr, scales_ptr, layer * stride_b_l, layer * stride_r_l, layer * stride_s_l, stride_b_b, stride_b_s,
                   stride_r_b, stride_r_s, stride_s_b, stride_s_s, PAGE_SIZE, ROPE_OFF, NUM_SLOTS, False)

    # q (rows past num_heads are zeros), while the first copies fly
    q_layout: gl.constexpr = _lat_copy()
    rows_q = gl.arange(0, BLOCK_M, gl.SliceLayout(1, q_layout))
    q_row = tok.to(gl.int64) * stride_q_t + rows_q.to(gl.int64) * stride_q_h
    q_s.store(gl.load(q_ptr + q_row[:, None] + gl.arange(0, D_LAT, gl.SliceLayout(0, q_layout))[None, :],
                      mask=(rows_q < num_heads)[:, None], other=0.0))
    r_layout: gl.constexpr = _rope_copy()
    rows_r = gl.arange(0, BLOCK_M, gl.SliceLayout(1, r_layout))
    qr_row = tok.to(gl.int64) * stride_q_t + rows_r.to(gl.int64) * stride_q_h + D_LAT
    qr_s.store(gl.load(q_ptr + qr_row[:, None] + gl.arange(0, D_ROPE, gl.SliceLayout(0, r_layout))[None, :],
                       mask=(rows_r < num_heads)[:, None], other=0.0))
    gl.thread_barrier()
    q_rope = qr_s.load(gl.DotOperandLayout(operand_index=0, parent=layout, k_width=2))

    acc0, acc1, acc2, acc3, m_i, l_cols = _ring_loop(
        q_s, q_rope, lat_s, rope_s, sc_s, lat_bf, idx_s, idx_row, stride_idx_k, lo, hi, 0, count, pool_rows,
        blocks_ptr, rope_ptr, scales_ptr, layer * stride_b_l, layer * stride_r_l, layer * stride_s_l, stride_b_b,
        stride_b_s, stride_r_b, stride_r_s, stride_s_b, stride_s_s, qk_scale, False, 0, 0, PAGE_SIZE, ROPE_OFF,
        NUM_SLOTS, False)

    l_i, has, lse = _row_lse(m_i, l_cols)
    rows = gl.arange(0, BLOCK_M, gl.SliceLayout(1, layout))
    rows_ok = rows < num_heads
    if SPLIT:
        inv = gl.where(has, 1.0 / gl.where(has, l_i, 1.0), 0.0)
        row_off = split.to(gl.int64) * stride_po_s + tok.to(gl.int64) * stride_po_t + rows.to(gl.int64) * stride_po_h
        _store_rows(part_out_ptr, row_off, acc0, acc1, acc2, acc3, inv, rows_ok, True)
        gl.store(part_lse_ptr + split.to(gl.int64) * stride_pl_s + tok.to(gl.int64) * stride_pl_t + rows, lse,
                 mask=rows_ok, eviction_policy="evict_last")
    else:
        inv = _finish_scale(l_i, has, m_i, sink_ptr, rows, rows_ok, HAS_SINK)
        row_off = tok.to(gl.int64) * stride_o_t + rows.to(gl.int64) * stride_o_h
        _store_rows(out_ptr, row_off, acc0, acc1, acc2, acc3, inv, rows_ok, False)
        gl.store(lse_ptr + tok.to(gl.int64) * stride_lse_t + rows.to(gl.int64) * stride_lse_h, lse, mask=rows_ok)
