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


def test_prefill_staging_pads_sequences_and_rows():
    """PrefillGraphs' staging (CPU, nothing captured): empty sequence slots, rows of no sequence, logits rows."""
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.async_scheduler import CarriedTokens
    from nanoserve.engine.cuda_graph import bucket_for
    from nanoserve.engine.prefill_graph import PREFILL_TOKEN_BUCKETS, PrefillGraphs, with_carry

    class Capturable(TorchAttentionBackend):
        supports_cuda_graphs = True

    assert [bucket_for(n, PREFILL_TOKEN_BUCKETS) for n in (1, 16, 17, 512, 513)] == [16, 16, 32, 512, None]
    last = torch.zeros(4, dtype=torch.int64)
    g = PrefillGraphs(None, [], Capturable(), max_model_len=16, block_size=4, last_tokens=last, device="cpu",
                      buckets=(8, 16), max_seqs=3)
    step = build_step_inputs([[-1], [21, 22, 23]], starts=[5, 4], block_tables=[[3, 4], [7, 8]],
                             samples=[True, True], block_size=4)
    assert g.bucket_for(step) == 8
    g.stage(with_carry(step, CarriedTokens(rows=np.array([0]), src=np.array([1]), tokens=torch.tensor([40, 41]))))
    x = g.inputs
    assert x["input_ids"].tolist() == [-1, 21, 22, 23, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    assert x["carry_src"].tolist()[:2] == [1, -1] and last.tolist()[:2] == [40, 41]  # eager tokens copied in
    assert x["slot_mapping"].tolist() == [17, 32, 33, 34] + [-1] * 12
    assert x["cu_seqlens_q"].tolist() == [0, 1, 4, 4] and x["cu_seqlens_k"].tolist() == [0, 6, 13, 13]
    assert x["context_lens"].tolist() == [6, 7, 0] and x["logits_indices"].tolist() == [0, 3, 0]
    assert x["block_tables"].tolist() == [[3, 4, 0, 0], [7, 8, 0, 0], [0, 0, 0, 0]]
    decode = build_step_inputs([[1], [2]], [3, 3], [[0], [1]], [True, True], block_size=4)
    crowded = build_step_inputs([[1, 2]] * 4, [0] * 4, [[0]] * 4, [True] * 4, block_size=4)
    assert g.bucket_for(decode) is None and g.bucket_for(crowded) is None  # decode graphs' job; 4 > 3 slots
