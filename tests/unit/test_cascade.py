"""Cascade attention (chapter 13): shared-prefix detection, its plan and staging, and the merge equal plain attention."""
import numpy as np
import pytest
import torch

from nanoserve.attention.batch import AttentionBatch, allocate_kv_cache
from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.attention.cascade import (CascadeBatch, CascadeDecode, attend_with_lse, common_prefix_blocks,
                                         merge_attention, shared_prefix)
from nanoserve.engine.cuda_graphs import StaticInputs
from nanoserve.engine.model_runner import build_step_inputs


def test_common_prefix_blocks():
    tables = np.array([[3, 8, 20, 21], [3, 8, 30, -1], [3, 8, 40, 41]])
    assert common_prefix_blocks(tables, np.array([14, 10, 16]), 4) == 2
    assert common_prefix_blocks(tables, np.array([14, 8, 16]), 4) == 1  # block 8 holds a newest token
    assert common_prefix_blocks(tables, np.array([1, 10, 16]), 4) == 0
    assert common_prefix_blocks(np.array([[5, 6], [7, 6]]), np.array([8, 8]), 4) == 0  # equal later, not leading
    assert common_prefix_blocks(np.array([[5, 6, 7]]), np.array([12]), 4) == 2  # one sequence: all but its last


def test_shared_prefix_takes_the_largest_group():
    tables = np.array([[3, 8, 20], [9, 1, 30], [3, 8, 40], [3, 8, 41], [-1, -1, -1]])
    blocks, members = shared_prefix(tables, np.array([10, 10, 10, 10, 1]), 4)
    assert blocks == 2 and members.tolist() == [True, False, True, True, False]
    assert shared_prefix(np.full((2, 2), -1), np.array([1, 1]), 4)[0] == 0


def test_merge_of_two_halves_is_attention_over_the_union():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(5, 4, 8, generator=g), torch.randn(30, 2, 8, generator=g), torch.randn(30, 2, 8, generator=g)
    whole, whole_lse = attend_with_lse(q, k, v)
    merged = merge_attention(*attend_with_lse(q, k[:11], v[:11]), *attend_with_lse(q, k[11:], v[11:]))
    torch.testing.assert_close(merged, whole)
    assert whole_lse.shape == (5, 4)


def test_merge_members_gives_a_non_member_its_own_attention():
    """On a CPU merge_members is the masked merge: members merge both halves, the others keep the suffix's."""
    from nanoserve.attention.cascade import merge_attention, merge_members

    g = torch.Generator().manual_seed(2)
    out_a, out_b = torch.randn(6, 4, 8, generator=g), torch.randn(6, 4, 8, generator=g)
    lse_a, lse_b = torch.randn(4, 6, generator=g).t(), torch.randn(6, 4, generator=g)  # lse_a transposed, as flash's
    members = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.int32)
    got = merge_members(out_a, lse_a, out_b, lse_b, members)
    torch.testing.assert_close(got[members == 1], merge_attention(out_a, lse_a, out_b, lse_b)[members == 1])
    torch.testing.assert_close(got[members == 0], out_b[members == 0])


@pytest.mark.parametrize("shared", [1, 2, 3])
def test_cascade_attention_equals_plain_decode_attention(shared):
    g = torch.Generator().manual_seed(shared)
    block = 4
    _, caches = allocate_kv_cache(2, 40, block, 2, 8)
    for k_cache, v_cache in caches:
        k_cache.copy_(torch.randn(k_cache.shape, generator=g))
        v_cache.copy_(torch.randn(v_cache.shape, generator=g))
    lanes = 6  # lane 5 holds a private copy of the prefix: it is not a member
    own = torch.randint(1, 9, (lanes,), generator=g)
    context = (shared * block + own).to(torch.int32)
    tables = torch.full((lanes, shared + 3), -1, dtype=torch.int32)
    tables[:, :shared] = torch.arange(shared)
    tables[5, :shared] = torch.arange(30, 30 + shared)
    for i, n in enumerate(own.tolist()):
        need = -(-n // block)
        tables[i, shared:shared + need] = torch.arange(10 + 3 * i, 10 + 3 * i + need)
    backend = TorchAttentionBackend()
    q, k, v = torch.randn(lanes, 4, 8, generator=g), torch.randn(lanes, 2, 8, generator=g), torch.randn(lanes, 2, 8, generator=g)
    slots = torch.tensor([int(tables[i, (c - 1) // block]) * block + (c - 1) % block for i, c in enumerate(context.tolist())])
    plain_batch = AttentionBatch(slots, None, None, 1, 64, context, tables, caches, backend, is_decode=True)
    plain = backend.forward(q, k, v, 1, plain_batch)
    blocks, members = shared_prefix(tables.numpy(), context.numpy(), block)
    assert blocks == shared and members.tolist() == [True] * 5 + [False]
    attention = CascadeDecode(backend, [16], max_model_len=64, block_size=block)
    prefix = AttentionBatch(None, torch.tensor([0, lanes]), torch.tensor([0, shared * block]), lanes, 64, None,
                            tables[:1, :shared], caches, backend)
    skip = torch.tensor([shared] * 5 + [0])
    suffix_tables = torch.stack([torch.cat([tables[i, int(skip[i]):], torch.full((int(skip[i]),), -1, dtype=torch.int32)])
                                 for i in range(lanes)])
    suffix = AttentionBatch(None, None, None, 1, 64, context - skip * block, suffix_tables, caches, backend,
                            is_decode=True)
    member_flags = torch.tensor(members, dtype=torch.int32)
    merged = attention.forward(q, k, v, 1, CascadeBatch(slots, prefix, suffix, member_flags, caches, attention))
    torch.testing.assert_close(merged, plain)


def staged(cascade, step):
    """(plan, staged views) of a decode step, or (None, None) when the cascade does not take it."""
    plan = cascade.plan(step)
    if plan is None:
        return None, None
    own = StaticInputs(cascade.fields(), "cpu")
    cascade.stage(own.host(), step, plan)
    own.send()
    return plan, own


def test_cascade_plan_and_staging_on_cpu():
    """The staged prefix and suffixes of a decode step; below the threshold the plain decode is chosen."""
    cascade = CascadeDecode(TorchAttentionBackend(), [8, 16, 32], max_model_len=128, block_size=16)
    assert cascade.buckets == [16, 32]
    tables = [[0, 1, 2, 10 + i, 40 + i] for i in range(20)]
    step = build_step_inputs([[7]] * 20, [60 + i for i in range(20)], tables, [True] * 20, block_size=16)
    assert cascade.plan(step) is None  # 19 x 48 saved reads are far below the default threshold
    cascade.min_shared_reads = 900
    plan, x = staged(cascade, step)
    assert plan.bucket == 32 and plan.state[0] == 3
    assert x["prefix_table"][0, :4].tolist() == [0, 1, 2, 0] and x["prefix_cu_k"].tolist() == [0, 48]
    assert x["suffix_tables"][0, :3].tolist() == [10, 40, 0] and x["suffix_lens"][:2].tolist() == [13, 14]
    assert x["suffix_lens"][20:].tolist() == [1] * 12  # padding lanes: one token of block 0
    assert x["members"].tolist() == [1] * 20 + [0] * 12
    tables[3] = [50, 51, 52, 13, 43]  # a private copy of the prefix: the others still share it
    cascade.min_shared_reads = 800  # 18 members x 48 tokens
    plan, x = staged(cascade, build_step_inputs([[7]] * 20, [60 + i for i in range(20)], tables, [True] * 20,
                                                block_size=16))
    assert plan.state[0] == 3 and x["members"][:5].tolist() == [1, 1, 1, 0, 1]
    assert x["suffix_tables"][3, :5].tolist() == [50, 51, 52, 13, 43] and x["suffix_lens"][3].item() == 64
    few = build_step_inputs([[7]] * 8, [60] * 8, tables[:8], [True] * 8, block_size=16)
    assert cascade.plan(few) is None  # fewer lanes than CASCADE_MIN_LANES


def test_disable_cascade_attn_leaves_the_cascade_out():
    """vLLM's switch (and a cache without prefix caching): the GraphRunner gets no cascade variant."""
    from nanoserve.engine.config import EngineConfig
    from nanoserve.engine.selector import graph_variants
    from nanoserve.model.loader import load_config
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(__import__("tempfile").mkdtemp() + "/tiny")
    model_config = load_config(path)
    for kwargs, names in ((dict(), ["cascade", "decode", "mixed"]), (dict(disable_cascade_attn=True), ["decode", "mixed"]),
                          (dict(enable_prefix_caching=False), ["decode", "mixed"]),
                          (dict(max_num_seqs=8), ["decode", "mixed"])):
        config = EngineConfig(str(path), device="cpu", **kwargs).resolve(model_config)
        assert [v.name for v in graph_variants(config, TorchAttentionBackend())] == names
    with pytest.raises(TypeError, match="disable_cascade_attn"):
        EngineConfig(str(path), disable_cascade_attn="yes")
