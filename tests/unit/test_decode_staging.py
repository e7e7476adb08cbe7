"""The graphs' one-copy staging writes exactly what pad_decode_inputs describes (CPU: nothing captured)."""
import numpy as np
import pytest
import torch

from nanoserve.engine.cuda_graph import DecodeStaging, graph_sample, pad_decode_inputs
from nanoserve.engine.model_runner import build_step_inputs


def decode_step(ids, positions, tables, block_size=4):
    """A decode StepInputs: one new token per sequence at `positions`."""
    return build_step_inputs([[i] for i in ids], positions, tables, [True] * len(ids), block_size)


def test_staged_buffers_equal_padded_inputs():
    g = DecodeStaging([1, 2, 4, 8], max_model_len=12, block_size=4, device="cpu")
    ids, pos, tables = [5, 6, 7], [9, 3, 4], [[2, 3, 4], [1], [4, 8]]
    step = decode_step(ids, pos, tables)
    assert g.stage(step) == 4
    p = pad_decode_inputs(ids, pos, step.slot_mapping.tolist(), [10, 4, 5], tables, bucket=8, table_width=3)
    assert g.input_ids.tolist() == p.input_ids and g.positions.tolist() == p.positions
    assert g.slot_mapping.tolist() == p.slot_mapping and g.context_lens.tolist() == p.context_lens
    assert g.block_tables.tolist() == p.block_tables
    assert g.cu_seqlens_k.tolist() == np.concatenate([[0], np.cumsum(p.context_lens)]).tolist()
    assert g.greedy.tolist() == [1] * 8 and g.temperature.tolist() == [1.0] * 8


def test_sampling_rows_and_narrow_tables():
    g = DecodeStaging([1, 2], max_model_len=16, block_size=4, device="cpu")
    g.stage(decode_step([1, 2], [0, 5], [[0], [2, 3]]), temperatures=[0.0, 0.5])
    assert g.block_tables.tolist() == [[0, -1, -1, -1], [2, 3, -1, -1]]
    torch.testing.assert_close(g.temperature, torch.tensor([1.0, 0.5]))
    assert g.greedy.tolist() == [1, 0]


def test_staging_refuses_bad_inputs():
    g = DecodeStaging([1, 2], max_model_len=8, block_size=4, device="cpu")
    with pytest.raises(ValueError, match="bucket"):
        g.stage(decode_step([1, 2, 3], [0, 0, 0], [[0], [0], [0]]))
    with pytest.raises(ValueError, match="width"):
        g.stage(decode_step([1], [11], [[0, 1, 2]]))
    with pytest.raises(ValueError, match="one token per sequence"):
        g.stage(build_step_inputs([[1, 2]], [0], [[0]], [True], 4))
    with pytest.raises(ValueError, match="temperatures"):
        g.stage(decode_step([1], [0], [[0]]), temperatures=[0.0, 1.0])


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


def test_mixed_token_buckets():
    """Doubling to 512, then x1.5 and x4/3 in turn, ending exactly at the budget; bad budgets refused."""
    from nanoserve.engine.prefill_graph import mixed_token_buckets

    assert mixed_token_buckets(8192) == [16, 32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192]
    assert mixed_token_buckets(16) == [16] and mixed_token_buckets(5) == [5]
    assert mixed_token_buckets(1000) == [16, 32, 64, 128, 256, 512, 768, 1000]
    for bad in (0, -3, 2.5, True, "512"):
        with pytest.raises(ValueError, match="max_tokens"):
            mixed_token_buckets(bad)


def test_mixed_layout_lanes_first_pieces_after():
    """One-query sequences become lanes at the front; longer chunks become pieces of <= piece_len queries."""
    from nanoserve.engine.prefill_graph import plan_mixed_layout

    step = build_step_inputs([list(range(10)), [7], [1, 2, 3], [8]], starts=[4, 20, 0, 3],
                             block_tables=[[0, 1, 2, 3], [4, 5, 6, 7, 8, 9], [10], [11]],
                             samples=[True, True, True, True], block_size=4)
    layout = plan_mixed_layout(step, piece_len=4)
    assert layout.order.tolist() == [10, 14, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13]
    assert layout.lane_seqs.tolist() == [1, 3]
    assert layout.piece_seqs.tolist() == [0, 0, 0, 2]
    assert layout.piece_starts.tolist() == [2, 6, 10, 12, 15]
    assert layout.piece_keys.tolist() == [8, 12, 14, 3]  # 4 cached + 4, + 8, + 10; the fresh prompt: 3
    assert layout.graph_rows(step.logits_indices.numpy()).tolist() == [11, 0, 14, 1]
    decodes = build_step_inputs([[1], [2]], [3, 3], [[0], [1]], [True, True], block_size=4)
    assert plan_mixed_layout(decodes).piece_starts.tolist() == [2]  # no pieces at all


def test_mixed_staging_pads_lanes_pieces_and_rows():
    """MixedStepGraphs' staging (CPU, nothing captured): layout order, padded lanes and pieces, carry rows mapped."""
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.async_scheduler import CarriedTokens
    from nanoserve.engine.prefill_graph import MixedStepGraphs, with_carry

    last = torch.zeros(4, dtype=torch.int64)
    g = MixedStepGraphs(None, [], TorchAttentionBackend(), max_model_len=16, block_size=4, last_tokens=last,
                        max_seqs=3, buckets=(8, 16), device="cpu")
    assert (g.lanes_for(8), g.pieces_for(8), g.lanes_for(16), g.pieces_for(16)) == (3, 3, 3, 3)
    step = build_step_inputs([[21, 22, 23], [-1]], starts=[4, 5], block_tables=[[7, 8], [3, 4]],
                             samples=[True, True], block_size=4)
    assert g.bucket_for(step) == 8
    g.stage(with_carry(step, CarriedTokens(rows=np.array([3]), src=np.array([1]), tokens=torch.tensor([40, 41]))))
    x = g.inputs
    assert x["input_ids"].tolist() == [-1, 21, 22, 23] + [0] * 12  # the decode moved to row 0
    assert x["carry_src"].tolist()[:4] == [1, -1, -1, -1] and last.tolist()[:2] == [40, 41]
    assert x["slot_mapping"].tolist() == [17, 32, 33, 34] + [-1] * 12
    assert x["num_lanes"].tolist() == [1] and x["lane_context_lens"].tolist() == [6, 1, 1]
    assert x["lane_block_tables"].tolist() == [[3, 4, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert x["piece_cu_q"].tolist() == [1, 4, 4, 4] and x["piece_cu_k"].tolist() == [0, 7, 7, 7]
    assert x["piece_context_lens"].tolist() == [7, 0, 0]
    assert x["piece_block_tables"].tolist() == [[7, 8, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert x["logits_indices"].tolist() == [3, 0, 0]
    decode = build_step_inputs([[1], [2]], [3, 3], [[0], [1]], [True, True], block_size=4)
    crowded = build_step_inputs([[1, 2]] * 4, [0] * 4, [[0]] * 4, [True] * 4, block_size=4)
    long = build_step_inputs([list(range(17))], [0], [[0, 1, 2, 3, 4]], [True], block_size=4)
    assert g.bucket_for(decode) is None and g.bucket_for(crowded) is None and g.bucket_for(long) is None
    with pytest.raises(ValueError, match="mixed-step graph"):
        g.replay(long)
