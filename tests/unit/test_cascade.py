"""Cascade attention (chapter 09, section 9): shared-prefix detection, staging, and the merge equal plain attention."""
import numpy as np
import pytest
import torch

from nanoserve.attention.batch import AttentionBatch, allocate_kv_cache
from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.engine.cascade import (CascadeAttention, CascadeBatch, CascadeDecodeGraphs, common_prefix_blocks,
                                      merge_attention, shared_prefix)
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
    from nanoserve.engine.cascade import attend_with_lse

    whole, whole_lse = attend_with_lse(q, k, v)
    merged = merge_attention(*attend_with_lse(q, k[:11], v[:11]), *attend_with_lse(q, k[11:], v[11:]))
    torch.testing.assert_close(merged, whole)
    assert whole_lse.shape == (5, 4)


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
    attention = CascadeAttention(backend)
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


def test_cascade_staging_on_cpu():
    """The staged prefix and suffixes of a decode step; below the threshold the plain graph is chosen."""
    class Capturable(TorchAttentionBackend):
        supports_cuda_graphs = True

    staging = CascadeDecodeGraphs(None, [], Capturable(), [16, 32], max_model_len=128, block_size=16, device="cpu")
    tables = [[0, 1, 2, 10 + i, 40 + i] for i in range(20)]
    step = build_step_inputs([[7]] * 20, [60 + i for i in range(20)], tables, [True] * 20, block_size=16)
    staging.stage(step)
    assert staging.shared_blocks == 0  # 19 x 48 saved reads are far below the default threshold
    staging.min_shared_reads = 900
    staging.stage(step)
    assert staging.shared_blocks == 3
    assert staging.prefix_table[0, :4].tolist() == [0, 1, 2, 0] and staging.prefix_cu_k.tolist() == [0, 48]
    assert staging.suffix_tables[0, :3].tolist() == [10, 40, 0] and staging.suffix_lens[:2].tolist() == [13, 14]
    assert staging.suffix_lens[20:].tolist() == [1] * 12  # padding lanes: one token of block 0
    assert staging.members.tolist() == [1] * 20 + [0] * 12
    tables[3] = [50, 51, 52, 13, 43]  # a private copy of the prefix: the others still share it
    staging.min_shared_reads = 800  # 18 members x 48 tokens
    staging.stage(build_step_inputs([[7]] * 20, [60 + i for i in range(20)], tables, [True] * 20, block_size=16))
    assert staging.shared_blocks == 3 and staging.members[:5].tolist() == [1, 1, 1, 0, 1]
    assert staging.suffix_tables[3, :5].tolist() == [50, 51, 52, 13, 43] and staging.suffix_lens[3].item() == 64
    few = build_step_inputs([[7]] * 8, [60] * 8, tables[:8], [True] * 8, block_size=16)
    staging.stage(few)
    assert staging.shared_blocks == 0  # fewer lanes than CASCADE_MIN_LANES


def test_disable_cascade_attn_keeps_the_plain_carrying_graphs():
    """vLLM's switch: the runner captures CarryingDecodeGraphs instead of CascadeDecodeGraphs."""
    from nanoserve.engine.async_runner import AsyncModelRunner
    from nanoserve.engine.config import EngineConfig
    from nanoserve.engine.prefill_graph import CarryingDecodeGraphs
    from nanoserve.model.loader import load_config
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(__import__("tempfile").mkdtemp() + "/tiny")
    model_config = load_config(path)
    for off, cls in ((False, CascadeDecodeGraphs), (True, CarryingDecodeGraphs)):
        config = EngineConfig(str(path), device="cpu", disable_cascade_attn=off).resolve(model_config)
        assert AsyncModelRunner(config, model_config).decode_graphs_class is cls
    with pytest.raises(TypeError, match="disable_cascade_attn"):
        EngineConfig(str(path), disable_cascade_attn="yes")


def test_replay_picks_the_cascade_graph_only_for_a_step_that_shares():
    """The plain and cascade forward graphs (stand-ins that log their replays) are chosen by the step just staged."""
    class Capturable(TorchAttentionBackend):
        supports_cuda_graphs = True

    class Logged:
        def __init__(self, name, log):
            self.name, self.log = name, log

        def replay(self):
            self.log.append(self.name)

    staging = CascadeDecodeGraphs(None, [], Capturable(), [16, 32], max_model_len=128, block_size=16, device="cpu")
    staging.min_shared_reads, log = 900, []
    for kind in ("graphs", "cascade_graphs", "greedy_graphs", "sample_graphs"):
        setattr(staging, kind, {b: Logged(f"{kind}{b}", log) for b in (16, 32)})
    staging.hidden, staging.samples = {b: torch.zeros(b, 4) for b in (16, 32)}, True
    tables = [[0, 1, 2, 10 + i, 40 + i] for i in range(20)]
    sharing = build_step_inputs([[7]] * 20, [60 + i for i in range(20)], tables, [True] * 20, block_size=16)
    few = build_step_inputs([[7]] * 8, [60] * 8, tables[:8], [True] * 8, block_size=16)
    assert staging.replay(sharing).shape == (20, 4) and log == ["cascade_graphs32"]
    staging.replay(few)
    staging.replay_sampled(sharing, [0.0] * 20)
    staging.replay_sampled(few, [0.7] * 8)
    assert log == ["cascade_graphs32", "graphs16", "cascade_graphs32", "greedy_graphs32", "graphs16",
                   "sample_graphs16"]
    assert staging.num_cascade_steps == 2
