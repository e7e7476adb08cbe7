"""The torch reference paged attention equals dense causal attention, in isolation and inside the model."""
import pytest
import torch

from course.paged_batch import build_attention_batch, slots_for
from nanoserve.attention.batch import AttentionBackend, AttentionBatch, allocate_kv_cache
from nanoserve.attention.torch_ref import TorchAttentionBackend, causal_attention_at_end, store_kv
from nanoserve.kv.blocks import BlockManager


def reference_attention(q, k, v):
    """Dense causal attention written out plainly, with the queries at the end of the keys."""
    t_q, n_heads, head_dim = q.shape
    s = k.shape[0]
    group = n_heads // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    out = torch.empty_like(q)
    for i in range(t_q):
        visible = s - t_q + i + 1
        scores = torch.einsum("hd,khd->hk", q[i], k[:visible]) * head_dim**-0.5
        out[i] = torch.einsum("hk,khd->hd", scores.softmax(-1), v[:visible])
    return out


def run_paged(context_lens, query_lens, block_size, n_heads=4, n_kv=2, head_dim=8, num_blocks=96,
              seed=0, scramble=7):
    """Store the cached part, run one step through the backend; return (out, q, full K/V, batch)."""
    gen = torch.Generator().manual_seed(seed)
    backend = TorchAttentionBackend()
    _, caches = allocate_kv_cache(2, num_blocks, block_size, n_kv, head_dim)
    bm = BlockManager(num_blocks, block_size)
    for _ in range(scramble):  # make physical blocks non-contiguous and out of order
        bm.free(bm.allocate([], block_size * 3))
        bm.allocate([], 1)
    tables = [bm.allocate([], n) for n in context_lens]
    kv = [(torch.randn(n, n_kv, head_dim, generator=gen), torch.randn(n, n_kv, head_dim, generator=gen))
          for n in context_lens]
    past = [c - q for c, q in zip(context_lens, query_lens)]
    earlier = build_attention_batch(tables, past, past, block_size, caches, backend)
    store_kv(torch.cat([k[:p] for (k, _), p in zip(kv, past)]), torch.cat([v[:p] for (_, v), p in zip(kv, past)]),
             *caches[1], earlier.slot_mapping)
    batch = build_attention_batch(tables, context_lens, query_lens, block_size, caches, backend)
    q = torch.randn(sum(query_lens), n_heads, head_dim, generator=gen)
    new_k = torch.cat([k[p:] for (k, _), p in zip(kv, past)])
    new_v = torch.cat([v[p:] for (_, v), p in zip(kv, past)])
    out = backend.forward(q, new_k, new_v, 1, batch)
    return out, q, kv, batch, caches


def assert_matches_dense(context_lens, query_lens, block_size, **kw):
    out, q, kv, batch, caches = run_paged(context_lens, query_lens, block_size, **kw)
    starts = batch.cu_seqlens_q.tolist()
    for b, (k, v) in enumerate(kv):
        rows = slice(starts[b], starts[b + 1])
        torch.testing.assert_close(out[rows], reference_attention(q[rows], k, v))
        torch.testing.assert_close(out[rows], causal_attention_at_end(q[rows], k, v))
    if batch.is_decode:
        backend = batch.backend
        torch.testing.assert_close(backend.decode(q, *caches[1], batch), backend.varlen(q, *caches[1], batch))


@pytest.mark.parametrize("block_size", [1, 3, 4, 16])
def test_varlen_prefill_several_sequences(block_size):
    assert_matches_dense([5, 11, 3, 17], [5, 11, 3, 17], block_size)


def test_prefill_on_top_of_cached_prefix():
    assert_matches_dense([9, 14, 4], [3, 6, 4], block_size=4)


@pytest.mark.parametrize("block_size", [1, 4, 8])
def test_decode(block_size):
    assert_matches_dense([7, 1, 16, 13, 8], [1, 1, 1, 1, 1], block_size)


@pytest.mark.parametrize("n_heads, n_kv", [(8, 1), (8, 2), (4, 4)])
def test_gqa(n_heads, n_kv):
    assert_matches_dense([6, 10], [6, 1], block_size=4, n_heads=n_heads, n_kv=n_kv)
    assert_matches_dense([6, 10], [1, 1], block_size=4, n_heads=n_heads, n_kv=n_kv)


def test_sequences_ending_exactly_on_block_boundaries():
    assert_matches_dense([8, 16, 4], [8, 16, 4], block_size=4)
    assert_matches_dense([8, 16, 4], [1, 1, 1], block_size=4)
    assert_matches_dense([8, 16], [4, 8], block_size=4)


def test_mixed_prefill_and_decode_batch():
    assert_matches_dense([12, 5, 9], [1, 5, 2], block_size=4)


def test_store_kv_skips_padding_and_writes_slots():
    _, caches = allocate_kv_cache(1, 4, 2, 1, 3)
    k_cache, v_cache = caches[0]
    k = torch.arange(9.0).view(3, 1, 3)
    store_kv(k, -k, k_cache, v_cache, torch.tensor([5, -1, 0]))
    flat = k_cache.view(-1, 1, 3)
    torch.testing.assert_close(flat[5], k[0])
    torch.testing.assert_close(flat[0], k[2])
    assert flat[7].abs().sum() == 0  # -1 must not wrap around to the last slot
    torch.testing.assert_close(v_cache.view(-1, 1, 3)[5], -k[0])


def test_padded_decode_rows_are_zero():
    backend = TorchAttentionBackend()
    _, caches = allocate_kv_cache(1, 4, 2, 1, 4)
    batch = build_attention_batch([[2], []], [1, 0], [1, 0], 2, caches, backend)
    batch.slot_mapping = torch.tensor([4, -1])
    batch.cu_seqlens_q = torch.tensor([0, 1, 2], dtype=torch.int32)
    batch.is_decode = True
    q, k = torch.randn(2, 2, 4), torch.randn(2, 1, 4)
    out = backend.forward(q, k, k, 0, batch)
    assert torch.isfinite(out).all() and out[1].abs().sum() == 0
    torch.testing.assert_close(out[0], causal_attention_at_end(q[:1], k[:1], k[:1])[0])


def test_bfloat16_inputs_come_back_in_bfloat16():
    out, q, kv, batch, _ = run_paged([5], [5], 4)
    backend = TorchAttentionBackend()
    _, caches = allocate_kv_cache(1, 8, 4, 2, 8, dtype=torch.bfloat16)
    batch = build_attention_batch([[3, 1]], [5], [5], 4, caches, backend)
    k, v = kv[0]
    got = backend.forward(q.bfloat16(), k.bfloat16(), v.bfloat16(), 0, batch)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), out, atol=3e-2, rtol=3e-2)


def test_batch_helpers_and_protocol():
    assert isinstance(TorchAttentionBackend(), AttentionBackend)
    assert slots_for([7, 2, 5], 0, 10, 4) == [28, 29, 30, 31, 8, 9, 10, 11, 20, 21]
    with pytest.raises(ValueError):
        slots_for([1], 0, 5, 4)
    batch = build_attention_batch([[0, 1], [2]], [5, 3], [2, 3], 4, [], TorchAttentionBackend())
    assert isinstance(batch, AttentionBatch)
    assert batch.cu_seqlens_q.tolist() == [0, 2, 5] and batch.cu_seqlens_k.tolist() == [0, 5, 8]
    assert batch.block_tables.tolist() == [[0, 1], [2, -1]]
    assert batch.slot_mapping.tolist() == [3, 4, 8, 9, 10]
    assert (batch.max_seqlen_q, batch.max_seqlen_k, batch.is_decode) == (3, 5, False)
    assert batch.cu_seqlens_q.dtype == torch.int32 and batch.slot_mapping.dtype == torch.int64
    with pytest.raises(ValueError):
        build_attention_batch([[0]], [2], [3], 4, [], TorchAttentionBackend())
    cache, per_layer = allocate_kv_cache(3, 5, 4, 2, 8)
    assert cache.shape == (2, 3, 5, 4, 2, 8) and len(per_layer) == 3
    assert per_layer[2][1].data_ptr() == cache[1, 2].data_ptr()


def test_model_paged_prefill_then_decode_matches_dense():
    from nanoserve.model.qwen3 import Qwen3ForCausalLM
    from nanoserve.model.tiny import tiny_qwen3_config

    torch.manual_seed(0)
    config = tiny_qwen3_config()
    model = Qwen3ForCausalLM(config).eval()
    for p in model.parameters():  # deterministic, well-scaled random weights
        torch.nn.init.normal_(p, std=0.05)
    backend, block_size = TorchAttentionBackend(), 4
    _, caches = allocate_kv_cache(config.num_hidden_layers, 32, block_size, config.num_key_value_heads,
                                  config.head_dim)
    bm = BlockManager(32, block_size)
    prompts = [torch.randint(0, config.vocab_size, (n,)) for n in (7, 12, 3)]
    tables = [bm.allocate([], len(p) + 3) for p in prompts]
    with torch.no_grad():
        batch = build_attention_batch(tables, [len(p) for p in prompts], [len(p) for p in prompts],
                                      block_size, caches, backend)
        ids = torch.cat(prompts)
        positions = torch.cat([torch.arange(len(p)) for p in prompts])
        paged = model(ids, positions, batch)
        starts = batch.cu_seqlens_q.tolist()
        for b, p in enumerate(prompts):
            torch.testing.assert_close(paged[starts[b]:starts[b + 1]], model(p, torch.arange(len(p))),
                                       atol=1e-5, rtol=1e-4)
        nxt = torch.tensor([5, 6, 7])  # one decode step for all three
        batch = build_attention_batch(tables, [len(p) + 1 for p in prompts], [1, 1, 1], block_size, caches,
                                      backend)
        decoded = model(nxt, torch.tensor([len(p) for p in prompts]), batch)
        for b, p in enumerate(prompts):
            full = torch.cat([p, nxt[b:b + 1]])
            torch.testing.assert_close(decoded[b], model(full, torch.arange(len(full)))[-1], atol=1e-5, rtol=1e-4)


def test_k_none_means_the_caller_already_stored():
    """Chapter 03's protocol: k/v None leaves the cache alone and attends over what is there (chapter 10 stores
    them in its rotary launch)."""
    out, q, kv, batch, caches = run_paged([5, 9], [2, 1], 4)
    before = [c.clone() for c in caches[1]]
    again = batch.backend.forward(q, None, None, 1, batch)
    assert all(torch.equal(a, b) for a, b in zip(caches[1], before))
    torch.testing.assert_close(again, out)
