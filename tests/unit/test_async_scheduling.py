"""The host one step ahead (chapter 11): pending tokens in the scheduler, the device token table, abort mid-flight."""
import pytest
import torch

from nanoserve.attention.torch_ref import TorchAttentionBackend
from nanoserve.engine.async_core import AsyncEngineCore, TableEmbedding, needs_host_tokens, without_finished
from nanoserve.engine.async_core import AsyncScheduler, TokenTable, table_input_ids
from nanoserve.engine.config import EngineConfig
from nanoserve.engine.engine import LLMEngine
from nanoserve.engine.model_runner import ModelRunner, prepare_step_inputs
from nanoserve.engine.scheduler import ScheduledBatch, SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.kv.blocks import BlockManager
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams


def scheduler(num_blocks=16, block_size=4):
    return AsyncScheduler(SchedulerConfig(8, 32, 64), BlockManager(num_blocks, block_size))


def test_advance_then_commit_equals_update():
    specs = [(5, 3), (2, 4), (9, 2)]
    runs = []
    for split in (False, True):
        sched = scheduler()
        seqs = [Sequence(i, list(range(1, p + 1)), max_tokens=m) for i, (p, m) in enumerate(specs)]
        for s in seqs:
            sched.add(s)
        while sched.has_unfinished():
            batch = sched.schedule()
            tokens = [s.num_tokens % 7 if x else None for s, x in zip(batch.seqs, batch.samples)]
            if split:
                before = {s.seq_id: list(s.token_ids) for s in batch.seqs}
                pending = sched.advance(batch)
                assert all(sched.pending[s.seq_id] == 1 and s.token_ids == before[s.seq_id] for s in pending)
                sched.commit(pending, [t for t in tokens if t is not None])
            else:
                sched.update(batch, tokens)
        runs.append([(s.token_ids, s.finish_reason) for s in seqs])
    assert runs[0] == runs[1]


def test_a_sequence_whose_pending_token_is_its_last_is_not_scheduled():
    sched = scheduler()
    seq = Sequence(0, [1, 2, 3], max_tokens=1)
    sched.add(seq)
    sched.advance(sched.schedule())  # the prefill samples the one and only output token
    assert sched.schedule().is_empty  # nothing left to compute while that token is on its way
    assert sched.pending == {0: 1} and seq.token_ids == [1, 2, 3]  # counted, but token_ids stay true
    assert sched.commit([seq], [42]) == [seq] and seq.finish_reason == "length" and seq.output_token_ids == [42]


def test_commit_skips_finished_and_refuses_a_missing_pending_token():
    sched = scheduler()
    a, b = Sequence(0, [1, 2], max_tokens=5), Sequence(1, [3, 4], max_tokens=5)
    for s in (a, b):
        sched.add(s)
    pending = sched.advance(sched.schedule())
    sched.finish(a, "abort")  # aborted while its token was on its way
    assert sched.commit(pending, [7, 8]) == [] and b.token_ids == [3, 4, 8] and sched.pending == {}
    with pytest.raises(RuntimeError, match="pending"):
        sched.commit([b], [9])
    with pytest.raises(ValueError, match="tokens"):
        sched.commit([b], [])


def test_a_pending_token_is_staged_as_a_reference_to_its_table_row():
    """A decode of a pending token reads its input id on the device; the host stages -1 - row."""
    sched = scheduler()
    seqs = [Sequence(0, [1, 2, 3], max_tokens=4), Sequence(1, [4, 5], max_tokens=4)]
    for s in seqs:
        sched.add(s)
    table = TokenTable(4, "cpu")
    first = sched.schedule()
    step = prepare_step_inputs(first, None, 4, table.new_token_ids)  # both prefills sample
    assert step.input_ids.tolist() == [1, 2, 3, 4, 5]
    table.store(first.sampling_seqs, torch.tensor([70, 71]))  # what the core does after launching
    sched.advance(first)
    step = prepare_step_inputs(sched.schedule(), None, 4, table.new_token_ids)
    assert step.input_ids.tolist() == [-1, -2]
    assert table_input_ids(step.input_ids, table.tokens).tolist() == [70, 71]
    assert table_input_ids(torch.tensor([5, -2, 0]), table.tokens).tolist() == [5, 71, 0]


def test_the_table_embedding_embeds_the_resolved_ids():
    table, embed = TokenTable(2, "cpu"), torch.nn.Embedding(10, 3)
    table.tokens[:] = torch.tensor([7, 9])
    wrapped = TableEmbedding(embed, table)
    torch.testing.assert_close(wrapped(torch.tensor([4, -2, -1])), embed(torch.tensor([4, 9, 7])))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=2, tie_word_embeddings=False,
                                max_position_embeddings=64)


def engine(checkpoint, overlap=True, **kwargs):
    """An LLMEngine on the CPU."""
    return LLMEngine.from_args(str(checkpoint), device="cpu", dtype="float32", skip_tokenizer_init=True,
                               block_size=4, num_kv_blocks=32, async_scheduling=overlap, **kwargs)


def test_async_scheduling_defaults_off_on_the_cpu(checkpoint):
    assert engine(checkpoint, overlap=None).config.async_scheduling is False
    assert EngineConfig(model="x").async_scheduling is None  # "decide when resolving"


def test_cpu_async_core_runs_the_plain_runner(checkpoint):
    e = engine(checkpoint)
    assert type(e.core) is AsyncEngineCore and type(e.executor) is ModelRunner


def drain(e, outs, calls=None):
    """Step until nothing is left (or `calls` times); gather each request's streamed tokens."""
    n = 0
    while e.has_unfinished_requests() and (calls is None or n < calls):
        for o in e.step():
            outs.setdefault(o.request_id, []).extend(o.outputs[0].token_ids)
        n += 1
    return outs


PARAMS = [SamplingParams(temperature=0, max_tokens=6), SamplingParams(temperature=0, max_tokens=3, min_tokens=2),
          SamplingParams(temperature=0, max_tokens=7, repetition_penalty=1.3),  # history on the host: finish first
          SamplingParams(temperature=0.8, seed=4, max_tokens=5)]
PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [16, 17]]


def test_one_step_ahead_gives_the_synchronous_tokens(checkpoint):
    want = {}
    sync = engine(checkpoint, overlap=False, max_num_batched_tokens=8, max_num_seqs=4)
    for i, (p, sp) in enumerate(zip(PROMPTS, PARAMS)):
        sync.add_request(str(i), p, sp)
    drain(sync, want)
    e = engine(checkpoint, max_num_batched_tokens=8, max_num_seqs=4)
    for i, (p, sp) in enumerate(zip(PROMPTS, PARAMS)):
        e.add_request(str(i), p, sp)
    assert drain(e, {}) == want
    assert e.block_manager.num_free_blocks == e.num_kv_blocks
    assert e.stats.eager_steps == e.executor.num_eager_steps > 0  # on a CPU nothing is replayed


def test_abort_while_a_step_is_in_flight_leaves_the_engine_usable(checkpoint):
    params = SamplingParams(temperature=0, max_tokens=6)
    sync = engine(checkpoint, overlap=False)
    sync.add_request("kept", [6, 7, 8], params)
    want = drain(sync, {})["kept"]
    e = engine(checkpoint)
    e.add_request("gone", [1, 2, 3, 4, 5], params)
    e.add_request("kept", [6, 7, 8], params)
    assert e.step() == []  # the first step is still "on the GPU"
    outs = drain(e, {}, calls=2)
    e.abort_request("gone")  # its next token is in flight right now
    gone_before = len(outs.get("gone", []))
    drain(e, outs)
    assert outs["kept"] == want and len(outs["gone"]) == gone_before
    assert e.block_manager.num_free_blocks == e.num_kv_blocks
    e.add_request("again", [6, 7, 8], params)  # the engine goes on as before
    assert drain(e, {})["again"] == want


def test_a_batch_loses_sequences_that_stopped_before_it_launched():
    sched = scheduler()
    a = Sequence(0, [1, 2], max_tokens=5, params=SamplingParams(repetition_penalty=1.2))
    b = Sequence(1, [3, 4], max_tokens=5, params=SamplingParams())
    for s in (a, b):
        sched.add(s)
    sched.advance(sched.schedule())  # both prefilled, their tokens pending
    batch = sched.schedule()
    edited = {a.seq_id: {}}  # the core passes SamplingState.prepared: the sequences a logits processor edits
    assert needs_host_tokens(batch, sched.pending, edited)  # a's penalty counts its last token, still on its way
    sched.finish(b, "stop")  # found when the tokens came back
    kept = without_finished(batch)
    assert kept.seqs == [a] and kept.num_new_tokens == [1] and kept.samples == [True]
    assert not needs_host_tokens(ScheduledBatch([b], [1], [True]), sched.pending, edited)
