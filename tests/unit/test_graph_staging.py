"""The graph runners' CPU side (chapters 09, 12 and 13): bucket grid, staging (one copy per buffer), each variant's plan and
metadata."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from nanoserve.attention.mixed_step import MixedStep, plan_mixed_layout, token_buckets
from nanoserve.attention.paged_decode import PagedDecode, pick_bucket
from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.engine.config import EngineConfig
from nanoserve.engine.cuda_graphs import DecodeGraphRunner, StaticInputs, graph_buckets, graph_sample
from nanoserve.engine.graph_runner import DecodeVariant, GraphRunner
from nanoserve.engine.model_runner import build_step_inputs
from nanoserve.engine.selector import DECODE_MIN_LANES, graph_variants
from nanoserve.engine.spec_decode import SpeculativeConfig
from nanoserve.model.loader import load_config
from nanoserve.model.tiny import make_tiny_checkpoint


def decode_step(ids, positions, tables, block_size=4):
    """A decode StepInputs: one new token per sequence at `positions`."""
    return build_step_inputs([[i] for i in ids], positions, tables, [True] * len(ids), block_size)


def test_bucket_grid():
    assert graph_buckets(1) == [1] and graph_buckets(3) == [1, 2, 3] and graph_buckets(8) == [1, 2, 4, 8]
    assert graph_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert graph_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    assert graph_buckets(256)[-3:] == [224, 240, 256]
    assert graph_buckets(64, smallest=8) == [8, 16, 32, 48, 64] and graph_buckets(20, smallest=5) == [8, 16, 20]
    assert graph_buckets(3, smallest=8) == [3] and graph_buckets(8, smallest=8) == [8]  # never empty, ends at limit
    assert token_buckets(8192) == [16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
    assert token_buckets(1000)[-3:] == [512, 768, 1000] and token_buckets(16) == [16] and token_buckets(15) == []
    for bad in (0, -3, 2.5, True, "512"):
        with pytest.raises(ValueError, match="limit"):
            graph_buckets(bad)
        with pytest.raises(ValueError, match="limit"):
            token_buckets(bad)


@given(st.integers(1, 3000))
def test_grid_properties(limit):
    b, t = graph_buckets(limit), token_buckets(limit)
    assert b == sorted(set(b)) and b[0] == 1 and b[-1] == limit
    assert t == sorted(set(t)) and (t == [] if limit < 16 else t[0] == 16 and t[-1] == limit)


@given(st.integers(1, 300), st.integers(1, 400))
def test_pick_bucket_is_smallest_fit(limit, n):
    buckets = graph_buckets(limit)
    got = pick_bucket(n, buckets)
    if n > buckets[-1]:
        assert got is None
    else:
        assert got >= n and all(b < n for b in buckets if b < got)


def test_static_inputs_pad_every_field_on_each_fill():
    x = StaticInputs([("a", np.int64, (3,), -1), ("b", np.int32, (2, 2), 0), ("c", np.int32, (2,), [0, 9])], "cpu")
    assert x["a"].tolist() == [-1] * 3 and x["c"].tolist() == [0, 9]
    views = x.host()
    views["a"][:1], views["b"][1] = 5, 7
    x.send()
    assert x["a"].tolist() == [5, -1, -1] and x["b"].tolist() == [[0, 0], [7, 7]]
    x.host()
    x.send()
    assert x["a"].tolist() == [-1] * 3  # the next step starts from padding again


STUB_RUNNER = SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32, model=None,
                              model_config=SimpleNamespace(hidden_size=4))


def stub_graph_runner(variants):
    """A GraphRunner over a stand-in runner: staging only, nothing captured."""
    g = GraphRunner(STUB_RUNNER, variants)
    g._allocate()
    g.graphs = {(v.name, b): None for v in variants for b in v.buckets}  # as if captured
    return g


def test_decode_staging_pads_lanes_and_common_rows():
    decode = PagedDecode(TorchAttentionBackend(), [1, 2, 4, 8], max_model_len=12, block_size=4)
    g = DecodeGraphRunner(STUB_RUNNER, decode)
    g._allocate()
    step = decode_step([5, 6, 7], [9, 3, 4], [[2, 3, 4], [1], [4, 8]])
    assert decode.bucket_for(step) == 4
    g._stage_common(step, [0.0, 0.5, 0.0])
    own = g.own
    decode.stage(own.host(), step)
    own.send()
    c = g.common
    assert c["input_ids"].tolist()[:5] == [5, 6, 7, 0, 0]
    assert c["slot_mapping"].tolist()[:4] == [17, 7, 32, -1] and c["logits_indices"].tolist()[:4] == [0, 1, 2, 0]
    assert c["greedy"].tolist()[:4] == [1, 0, 1, 1]
    torch.testing.assert_close(c["temperature"][:4], torch.tensor([1.0, 0.5, 1.0, 1.0]))
    assert own["context_lens"].tolist() == [10, 4, 5, 1, 1, 1, 1, 1]
    assert own["block_tables"][:4].tolist() == [[2, 3, 4], [1, -1, -1], [4, 8, -1], [0, 0, 0]]
    assert own["cu_seqlens_k"].tolist()[:5] == [0, 10, 14, 19, 20]
    assert decode.bucket_for(build_step_inputs([[1, 2]], [0], [[0]], [True], 4)) is None  # a prefill: eager
    assert decode.bucket_for(decode_step([1] * 9, [0] * 9, [[0]] * 9)) is None  # wider than the largest bucket
    with pytest.raises(ValueError, match="width"):
        decode.stage(own.host(), decode_step([1], [11], [[0, 1, 2, 3]]))


def test_variants_are_tried_in_order():
    """Chapter 09's decode graphs as the first variant, the mixed step as the second; other steps find none."""
    backend = TorchAttentionBackend()
    decode = DecodeVariant(PagedDecode(backend, [1, 2, 4], max_model_len=16, block_size=4))
    mixed = MixedStep(backend, [8, 16], max_seqs=3, max_model_len=16, block_size=4)
    g = stub_graph_runner([decode, mixed])
    v, plan = g.plan(decode_step([5, 6, 7], [9, 3, 4], [[2, 3, 4], [1], [4, 8]]))
    assert v is decode and plan.bucket == 4 and plan.order is None
    v, plan = g.plan(build_step_inputs([[1, 2], [3]], [0, 5], [[0], [1, 2]], [True, True], 4))
    assert v is mixed and plan.bucket == 8
    assert g.plan(decode_step([1] * 5, [0] * 5, [[0]] * 5)) is None  # too many lanes for both


def test_graph_sampler_math_equals_eager_sampler():
    """The captured sampling step draws the same tokens as chapter 06's Sampler from the same generator state."""
    from nanoserve.sampler import Sampler
    from nanoserve.sampling import SamplingParams

    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    temps = [0.0, 0.7, 1.3, 0.0]
    temperature = torch.tensor([1.0 if t == 0 else t for t in temps])
    greedy = torch.tensor([int(t == 0) for t in temps])
    for seed in range(5):
        fused = graph_sample(logits, temperature, greedy, torch.Generator().manual_seed(seed))
        eager = Sampler(torch.Generator().manual_seed(seed))(logits, [SamplingParams(temperature=t) for t in temps])
        assert fused.tolist() == eager.tolist()


def test_mixed_layout_lanes_first_pieces_after():
    """One-query sequences become lanes at the front; longer chunks become pieces of <= piece_len queries."""
    step = build_step_inputs([list(range(10)), [7], [1, 2, 3], [8]], starts=[4, 20, 0, 3],
                             block_tables=[[0, 1, 2, 3], [4, 5, 6, 7, 8, 9], [10], [11]],
                             samples=[True, True, True, True], block_size=4)
    layout = plan_mixed_layout(step, piece_len=4)
    assert layout.order.tolist() == [10, 14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13]
    assert layout.lane_seqs.tolist() == [1, 3]
    assert layout.piece_seqs.tolist() == [0, 0, 0, 2]
    assert layout.piece_starts.tolist() == [2, 6, 10, 12, 15]
    assert layout.piece_keys.tolist() == [8, 12, 14, 3]  # 4 cached + 4, + 8, + 10; the fresh prompt: 3
    decodes = build_step_inputs([[1], [2]], [3, 3], [[0], [1]], [True, True], block_size=4)
    assert plan_mixed_layout(decodes).piece_starts.tolist() == [2]  # no pieces at all


def test_mixed_staging_pads_lanes_pieces_and_rows():
    """Layout order in the common rows, padded lanes and pieces, the logits rows mapped to graph rows."""
    mixed = MixedStep(TorchAttentionBackend(), [8, 16], max_seqs=3, max_model_len=16, block_size=4)
    assert [(mixed.logits_rows(b), mixed.pieces_for(b)) for b in (8, 16)] == [(3, 3), (3, 3)]
    g = stub_graph_runner([mixed])
    step = build_step_inputs([[21, 22, 23], [0]], starts=[4, 5], block_tables=[[7, 8], [3, 4]],
                             samples=[True, True], block_size=4)
    v, plan = g.plan(step)
    assert v is mixed and plan.bucket == 8
    g._stage_common(step, plan.order, None)
    own = g.own["mixed"]
    mixed.stage(own.host(), step, plan)
    own.send()
    c, x = g.common, own
    assert c["input_ids"].tolist()[:5] == [0, 21, 22, 23, 0]  # the decode moved to row 0
    assert c["slot_mapping"].tolist()[:5] == [17, 32, 33, 34, -1]
    assert c["logits_indices"].tolist() == [3, 0, 0]
    assert x["is_lane"].tolist() == [1, 0, 0] and x["lane_context_lens"].tolist() == [6, 1, 1]
    assert x["lane_block_tables"].tolist() == [[3, 4, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert x["piece_cu_q"].tolist() == [1, 4, 4, 4] and x["piece_cu_k"].tolist() == [0, 7, 7, 7]
    assert x["piece_context_lens"].tolist() == [7, 0, 0]
    assert x["piece_block_tables"].tolist() == [[7, 8, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    decode = build_step_inputs([[1], [2]], [3, 3], [[0], [1]], [True, True], block_size=4)
    crowded = build_step_inputs([[1, 2]] * 4, [0] * 4, [[0]] * 4, [True] * 4, block_size=4)
    long = build_step_inputs([list(range(17))], [0], [[0, 1, 2, 3, 4]], [True], block_size=4)
    assert mixed.plan(decode) is None and mixed.plan(crowded) is None and mixed.plan(long) is None



def test_engine_decode_buckets_start_at_decode_min_lanes(tmp_path):
    """The engine's decode buckets start at DECODE_MIN_LANES (or at max_num_seqs); verify steps keep the grid from 1."""
    path = make_tiny_checkpoint(tmp_path / "tiny")
    config = EngineConfig(str(path), device="cpu", max_num_seqs=64).resolve(load_config(path))
    spec = dataclasses.replace(config, speculative_config=SpeculativeConfig(num_speculative_tokens=3))
    buckets = {v.name: v.buckets for v in graph_variants(spec, TorchAttentionBackend())}
    assert DECODE_MIN_LANES == 8 and buckets["decode"] == [8, 16, 32, 48, 64]
    assert buckets["verify"][0] == 1 + 3  # one lane of its last token and 3 drafts
    small = dataclasses.replace(config, max_num_seqs=4)
    assert {v.name: v.buckets for v in graph_variants(small, TorchAttentionBackend())}["decode"] == [4]
