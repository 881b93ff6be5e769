import torch
import pagedmla as pm

torch.manual_seed(0)
kv_lora_rank, rope, heads, hidden = 64, 16, 4, 32          # DeepSeek: 512, 64, 128, 7168
params = pm.KVCacheParams(num_heads=1, head_size=kv_lora_rank + rope, is_mla=True, page_size=16,
                          num_layers=1, dtype=torch.float32)
manager = pm.PagedKVCacheManager(params, num_blocks=8)
w_kv_a = torch.randn(kv_lora_rank + rope, hidden) / hidden**0.5   # kv_a_proj_with_mqa.weight
gamma = torch.ones(kv_lora_rank)                                   # kv_a_layernorm.weight
angles = torch.arange(64)[:, None] * 10000.0 ** (-torch.arange(0, rope, 2) / rope)
freqs_cis = torch.stack([angles.cos(), angles.sin()], -1).flatten(1)  # [max_pos, rope]: cos, sin pairs
scale = (32 + rope) ** -0.5                                         # 1/sqrt(qk_nope_head_dim + rope)

requests = ["a", "b"]
for r in requests:
    manager.claim(r)
for new_tokens in ([20, 5], [1, 1]):                     # a prompt step, then one decode step
    kv = manager.step(requests, new_tokens)              # reserves pages; cache_lengths = L_b
    offsets = pm.row_offsets(new_tokens)                 # input_row_offsets, int32 [B+1]
    pm.k_matmul_ragged_paged(torch.randn(sum(new_tokens), hidden), offsets, w_kv_a, kv, 0)
    pm.rms_norm_key_cache(kv, gamma, 1e-6, 0, offsets, rms_norm_cols=kv_lora_rank)
    q_rope = pm.fused_qk_rope_ragged(torch.randn(sum(new_tokens), heads, rope), offsets, kv, freqs_cis, 0)
    q = torch.cat([torch.randn(sum(new_tokens), heads, kv_lora_rank), q_rope], -1)  # absorbed q
    out, lse = pm.mla_decode_kv_cache_ragged(q, offsets, kv, 0, scale, qk_rope_head_dim=rope,
                                             return_lse=True)
    manager.commit(requests, new_tokens)                 # the caller advances the lengths
print(out.shape, lse.shape)                              # [T, H, kv_lora_rank], [T, H]

# The decode row of "a" equals plain softmax attention over its 21 cache rows (V = latent columns).
rows = torch.cat([kv.key_cache(0)[p, :, 0] for p in manager.pages("a")])[: manager.length("a")]
expected = torch.softmax(scale * q[0] @ rows.T, dim=-1) @ rows[:, :kv_lora_rank]
print(torch.allclose(out[0], expected, atol=1e-5))
