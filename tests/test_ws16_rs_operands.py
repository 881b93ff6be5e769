"""The index algebra of the register-operand 16-row FP8 decode's operands (`pagedmla.kernels.mla_decode_ws16_rs`),
in torch, whose join / reshape / permute semantics the Gluon ops share: the permuted products equal the plain
ones. Checks the bookkeeping (a wrong join order or permutation fails here), not the kernel, which the gpu tier
tests against the reference."""

import torch


def join(a, b):
    """`gl.join`: the new index is the last dimension."""
    return torch.stack([a, b], dim=-1)


def test_logits_operand_and_q_share_a_column_order():
    """`_k_operand` (bytes of words 8 t + 4 g + s, joined (b0, b2), (b1, b3)) and `_q_chunk_f16` put column
    k = 64 g + 16 s + 8 h + 2 t + e of K and q on the same byte 32 t + 16 g + 4 s + 2 h + e."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=gen, dtype=torch.float64)  # a chunk: 64 keys x 128 bytes
    q = torch.randn(16, 128, generator=gen, dtype=torch.float64)
    b = x.reshape(64, 32, 4).unbind(-1)  # the four bytes of each word
    k_op = join(join(b[0], b[2]), join(b[1], b[3])).reshape(64, 4, 2, 4, 2, 2).permute(0, 2, 3, 4, 1, 5)
    q16 = q.reshape(16, 4, 2, 4, 2, 2).permute(0, 2, 3, 4, 1, 5)
    assert torch.allclose(k_op.reshape(64, 128) @ q16.reshape(16, 128).T, x @ q.T)
    # the order is a true permutation of the bytes (not a product that agrees by accident)
    idx = torch.arange(128.0).reshape(1, 128)
    perm = idx.reshape(1, 4, 2, 4, 2, 2).permute(0, 2, 3, 4, 1, 5).reshape(128)
    assert sorted(perm.tolist()) == list(range(128)) and perm.tolist() != list(range(128))
    k = torch.arange(128)
    g, s, h, t, e = k // 64, (k // 16) % 4, (k // 8) % 2, (k // 2) % 4, k % 2
    assert perm.long().tolist() == (32 * t + 16 * g + 4 * s + 2 * h + e).tolist()


def test_pv_operand_rows_are_relabeled_dims():
    """`_v_operand` (keys 2 kp and 2 kp + 1 paired byte by byte) gives V^T with row
    m = 64 a + 16 w + 8 h + r holding dim 32 w + 4 r + 2 a + h, which `_store_chunk` undoes."""
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(64, 128, generator=gen, dtype=torch.float64)  # 64 keys x 128 dims (bytes)
    p = torch.randn(64, 16, generator=gen, dtype=torch.float64)
    wk = v.reshape(32, 2, 32, 4)  # (kp, e, word, byte)
    d = [join(wk[:, 0, :, j], wk[:, 1, :, j]) for j in range(4)]
    t = join(join(d[0], d[1]), join(d[2], d[3])).permute(0, 1, 4, 3, 2).reshape(4, 2, 4, 4, 8, 2, 2, 2)
    vt = t.permute(5, 3, 6, 4, 0, 1, 2, 7).reshape(128, 64)
    m = torch.arange(128)
    dim = 32 * ((m // 16) % 4) + 4 * (m % 8) + 2 * (m // 64) + (m // 8) % 2
    assert sorted(dim.tolist()) == list(range(128))
    assert torch.allclose(vt @ p, (v.T @ p)[dim])
