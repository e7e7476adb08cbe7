"""DecodeGraphs' one-copy staging writes exactly what pad_decode_inputs describes (CPU: no capture needed)."""
import numpy as np
import pytest
import torch

from nanoserve.engine.cuda_graph import DecodeGraphs, pad_decode_inputs


def _staging(buckets, table_width):
    """A DecodeGraphs with static buffers on the CPU and nothing captured."""
    g = DecodeGraphs.__new__(DecodeGraphs)
    g.buckets, g.table_width = sorted(buckets), table_width
    g._allocate_static(g.buckets[-1], "cpu")
    return g


@pytest.mark.parametrize("as_tensors", [False, True])
def test_staged_buffers_equal_padded_inputs(as_tensors):
    g = _staging([1, 2, 4, 8], table_width=3)
    ids, pos, slots, ctx = [5, 6, 7], [9, 3, 4], [41, 13, 70], [10, 4, 5]
    tables = [[2, 3, -1], [1, -1, -1], [4, 8, -1]]
    args = [ids, pos, slots, ctx, tables]
    if as_tensors:
        args = [torch.tensor(a, dtype=torch.int32 if i >= 3 else torch.int64) for i, a in enumerate(args)]
    n, bs = g._prepare(*args)
    assert (n, bs) == (3, 4)
    p = pad_decode_inputs(ids, pos, slots, ctx, tables, bucket=8, table_width=3)
    assert g.input_ids.tolist() == p.input_ids and g.positions.tolist() == p.positions
    assert g.slot_mapping.tolist() == p.slot_mapping and g.context_lens.tolist() == p.context_lens
    assert g.block_tables.tolist() == p.block_tables
    assert g.cu_seqlens_k.tolist() == np.concatenate([[0], np.cumsum(p.context_lens)]).tolist()
    assert g.greedy.tolist() == [1] * 8 and g.temperature.tolist() == [1.0] * 8


def test_sampling_rows_and_narrow_tables():
    g = _staging([1, 2], table_width=4)
    g._prepare([1, 2], [0, 5], [3, 9], [1, 6], np.array([[0], [2]], np.int32),
               temperature=np.array([1.0, 0.5], np.float32), greedy=np.array([True, False]))
    assert g.block_tables.tolist() == [[0, -1, -1, -1], [2, -1, -1, -1]]
    torch.testing.assert_close(g.temperature, torch.tensor([1.0, 0.5]))
    assert g.greedy.tolist() == [1, 0]


def test_staging_refuses_bad_inputs():
    g = _staging([1, 2], table_width=2)
    with pytest.raises(ValueError, match="bucket"):
        g._prepare([1, 2, 3], [0, 0, 0], [0, 1, 2], [1, 1, 1], [[0], [0], [0]])
    with pytest.raises(ValueError, match="width"):
        g._prepare([1], [0], [0], [1], [[0, 1, 2]])
    with pytest.raises(ValueError, match="one entry"):
        g._prepare([1], [0, 1], [0], [1], [[0]])


def test_graph_sampler_math_equals_eager_sampler():
    """The captured sampling step draws the same tokens as chapter 06's Sampler from the same generator state."""
    from nanoserve.sampling import Sampler, SamplingParams

    class Head:
        def compute_logits(self, hidden):
            return hidden @ weight.T

    torch.manual_seed(0)
    weight = torch.randn(50, 8)
    g = _staging([4], table_width=1)
    g.model, g.hidden = Head(), {4: torch.randn(4, 8)}
    temps = [0.0, 0.7, 1.3, 0.0]
    g._prepare([0] * 4, [0] * 4, [0] * 4, [1] * 4, [[0]] * 4, temperature=np.array([1.0, 0.7, 1.3, 1.0], np.float32),
               greedy=np.array([t == 0 for t in temps]))
    for seed in range(5):
        fused = g._sample_tokens(4, torch.Generator().manual_seed(seed))
        eager = Sampler(torch.Generator().manual_seed(seed))(Head().compute_logits(g.hidden[4]),
                                                             [SamplingParams(temperature=t) for t in temps])
        assert fused.tolist() == eager.tolist()


def test_prefill_staging_pads_sequences_and_rows():
    """PrefillGraphs' staging (CPU, nothing captured): empty sequence slots, rows of no sequence, logits rows."""
    from nanoserve.attention.torch_ref import TorchAttentionBackend
    from nanoserve.engine.cuda_graph import PREFILL_TOKEN_BUCKETS, PrefillGraphs, bucket_for
    from nanoserve.engine.model_runner import CarriedTokens, build_step_inputs

    class Capturable(TorchAttentionBackend):
        supports_cuda_graphs = True

    assert [bucket_for(n, PREFILL_TOKEN_BUCKETS) for n in (1, 16, 17, 512, 513)] == [16, 16, 32, 512, None]
    last = torch.zeros(4, dtype=torch.int64)
    g = PrefillGraphs(None, [], Capturable(), max_model_len=16, block_size=4, last_tokens=last, device="cpu",
                      buckets=(8, 16), max_seqs=3)
    step = build_step_inputs([[-1], [21, 22, 23]], starts=[5, 4], block_tables=[[3, 4], [7, 8]],
                             samples=[True, True], block_size=4)
    assert g.bucket_for(step) == 8
    g.stage(step, CarriedTokens(rows=np.array([0]), src=np.array([1]), tokens=torch.tensor([40, 41])))
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
