"""Scheduler: token budget, chunked prefill, decode priority, preemption, prefix hits, termination."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanoserve.engine.scheduler import ScheduledBatch, Scheduler, SchedulerConfig
from nanoserve.engine.sequence import Sequence, SequenceStatus

from nanoserve.kv.blocks import BlockManager
from nanoserve.kv.prefix import PrefixCachingBlockManager

MANAGERS = [BlockManager, PrefixCachingBlockManager]


def fake_token(seq):
    """A sampled token that depends only on the sequence's content, never on scheduling."""
    return (seq.num_tokens * 31 + sum(seq.token_ids)) % 97


def make(num_blocks=64, block_size=4, max_num_seqs=8, budget=32, max_model_len=64, manager=BlockManager, **kw):
    bm = manager(num_blocks, block_size)
    return Scheduler(SchedulerConfig(max_num_seqs, budget, max_model_len, **kw), bm), bm


def add_all(sched, specs):
    seqs = [Sequence(i, [(i * 7 + j) % 50 + 1 for j in range(p)], max_tokens=m) for i, (p, m) in enumerate(specs)]
    for s in seqs:
        sched.add(s)
    return seqs


def run(sched, max_steps=10_000, check=None):
    """Step until done with fake sampling; return the batches."""
    batches = []
    for _ in range(max_steps):
        if not sched.has_unfinished():
            return batches
        batch = sched.schedule()
        assert not batch.is_empty, "schedule() made no progress while work remained"
        if check:
            check(batch)
        batches.append(batch)
        sched.update(batch, [fake_token(s) if smp else None for s, smp in zip(batch.seqs, batch.samples)])
    raise AssertionError("did not finish")


def test_budget_and_max_num_seqs_never_exceeded():
    sched, bm = make(max_num_seqs=3, budget=10)
    add_all(sched, [(9, 5), (4, 3), (13, 2), (2, 6), (7, 4)])

    def check(batch):
        assert batch.num_batched_tokens <= 10
        assert len(batch) <= 3 and sched.num_running <= 3
        assert all(n >= 1 for n in batch.num_new_tokens)
    run(sched, check=check)
    assert bm.num_free_blocks == bm.num_blocks


def test_chunked_prefill_splits_long_prompt_and_chunks_add_up():
    sched, _ = make(budget=8, max_model_len=64)
    (seq,) = add_all(sched, [(30, 2)])
    chunks = []
    while seq.num_output_tokens == 0:
        batch = sched.schedule()
        chunks.append(batch.num_new_tokens[0])
        assert batch.samples[0] == (sum(chunks) == 30)
        sched.update(batch, [fake_token(seq) if batch.samples[0] else None])
    assert chunks == [8, 8, 8, 6] and sum(chunks) == 30
    assert seq.num_computed_tokens == 30 and len(seq.block_table) == 30 // 4 + 1


def test_without_chunking_prompt_runs_whole_or_waits():
    sched, _ = make(budget=16, max_model_len=16, enable_chunked_prefill=False)
    add_all(sched, [(10, 2), (10, 2)])
    first = sched.schedule()
    assert first.num_new_tokens == [10]  # the second prompt would need 20 tokens: it waits
    run(sched)


def test_decodes_are_scheduled_before_prefill():
    sched, _ = make(budget=6)
    a, b = add_all(sched, [(3, 5), (3, 5)])
    sched.update(sched.schedule(), [1, 1])  # both prefilled, each now decoding
    (c,) = [Sequence(9, list(range(1, 21)), max_tokens=2)]
    sched.add(c)
    batch = sched.schedule()
    assert batch.seqs[:2] == [a, b] and batch.num_new_tokens == [1, 1, 4]
    assert batch.seqs[2] is c and batch.samples == [True, True, False]


def test_running_prefill_chunk_leaves_budget_for_decodes():
    sched, _ = make(budget=4)
    b, a = add_all(sched, [(2, 6), (20, 2)])
    batch = sched.schedule()
    assert batch.seqs == [b, a] and batch.num_new_tokens == [2, 2]
    sched.update(batch, [fake_token(b), None])
    for _ in range(4):  # a is still chunking its prompt, but b decodes every step
        batch = sched.schedule()
        assert batch.seqs == [b, a] and batch.num_new_tokens == [1, 3]
        sched.update(batch, [fake_token(s) if x else None for s, x in zip(batch.seqs, batch.samples)])
    assert b.num_output_tokens == 5 and a.num_computed_tokens == 14


def test_preemption_frees_blocks_requeues_at_front_and_completes():
    # 6 blocks of 4 tokens: two sequences growing to 4 blocks each cannot both stay
    sched, bm = make(num_blocks=6, block_size=4, budget=32, max_model_len=16)
    seqs = add_all(sched, [(6, 10), (6, 10)])
    late = Sequence(2, [3, 3, 3], max_tokens=2)
    sched.add(late)
    seen = []

    def check(batch):
        for victim in batch.preempted:
            assert victim.status is SequenceStatus.WAITING and victim.block_table == []
            assert victim.num_computed_tokens == 0 and sched.waiting[0] is victim or victim in sched.waiting
            seen.append(victim.seq_id)
        used = sum(len(set(s.block_table)) for s in sched.running)
        assert used + bm.num_free_blocks == bm.num_blocks
    run(sched, check=check)
    assert seen and seen[0] == 1  # the newest running one goes first
    for s in seqs + [late]:
        assert s.is_finished and s.finish_reason == "length" and s.num_output_tokens == s.max_tokens
    assert bm.num_free_blocks == bm.num_blocks


def test_preempted_goes_to_front_of_waiting():
    sched, _ = make(num_blocks=4, block_size=2, budget=32, max_model_len=16, max_num_seqs=2)
    a, b, c = add_all(sched, [(3, 5), (3, 5), (2, 2)])
    for _ in range(20):
        batch = sched.schedule()
        if batch.preempted:
            assert batch.preempted == [b] and list(sched.waiting)[:2] == [b, c]
            break
        sched.update(batch, [fake_token(s) if x else None for s, x in zip(batch.seqs, batch.samples)])
    else:
        raise AssertionError("expected a preemption")


def test_outputs_under_tiny_cache_equal_unconstrained_run():
    specs = [(5, 7), (9, 4), (3, 9), (12, 3), (4, 6)]
    big, _ = make(num_blocks=100, budget=64)
    tiny, bm = make(num_blocks=6, block_size=4, budget=5, max_model_len=24)
    ref, got = add_all(big, specs), add_all(tiny, specs)
    run(big)
    batches = run(tiny)
    assert any(b.preempted for b in batches)
    assert [s.token_ids for s in got] == [s.token_ids for s in ref]
    assert bm.num_free_blocks == bm.num_blocks


def test_eos_and_external_finish():
    sched, bm = make()
    a, b, c = add_all(sched, [(3, 50), (3, 5), (4, 5)])
    a.eos_token_ids = frozenset({0})
    batch = sched.schedule()
    done = sched.update(batch, [0, 1, 2])
    assert done == [a] and a.finish_reason == "stop" and a.block_table == []
    sched.finish(b, "abort")
    assert b.is_finished and b.finish_reason == "abort" and sched.num_running == 1
    w = Sequence(10, [1, 2], max_tokens=3)
    sched.add(w)
    sched.finish(w, "abort")
    assert sched.num_waiting == 0
    run(sched)
    assert c.finish_reason == "length" and bm.num_free_blocks == bm.num_blocks


class _Params:
    """The three SamplingParams fields the scheduler's stop rules read."""

    def __init__(self, stop_token_ids=(), min_tokens=0):
        self.stop_token_ids, self.min_tokens, self.prompt_logprobs = list(stop_token_ids), min_tokens, None


def test_stop_tokens_min_tokens_and_stop_on_the_last_token():
    sched, bm = make()
    early = Sequence(0, [1, 2, 3], max_tokens=5, params=_Params(stop_token_ids=[7], min_tokens=2),
                     eos_token_ids=[9])
    last = Sequence(1, [4, 5], max_tokens=2, params=_Params(stop_token_ids=[7]))
    for s in (early, last):
        sched.add(s)
    tokens = iter([[9, 8], [7, 7]])  # early: eos before min_tokens is kept; then a stop token
    while sched.has_unfinished():
        batch = sched.schedule()
        step = next(tokens)
        sched.update(batch, [step[s.seq_id] if x else None for s, x in zip(batch.seqs, batch.samples)])
    assert early.output_token_ids == [9, 7] and early.finish_reason == "stop" and early.stop_reason == 7
    assert last.output_token_ids == [8, 7] and last.finish_reason == "stop"  # on its last token: still "stop"
    assert bm.num_free_blocks == bm.num_blocks


def test_update_checks_lengths():
    sched, _ = make()
    add_all(sched, [(2, 2)])
    batch = sched.schedule()
    with pytest.raises(ValueError, match="sampled"):
        sched.update(batch, [])
    with pytest.raises(TypeError):
        sched.update(batch, [None])  # the row was due a sampled token


def test_a_request_that_fits_the_whole_cache_exactly_completes():
    sched, _ = make(num_blocks=4, block_size=4, max_model_len=64)
    sched.add(Sequence(2, [1] * 10, max_tokens=7))  # 16 cached tokens fit exactly (too big ones: A5's door)
    assert sched.num_waiting == 1
    run(sched)


def test_long_sequence_filling_the_whole_cache_completes():
    sched, bm = make(num_blocks=4, block_size=4, budget=5, max_model_len=17)
    (s,) = add_all(sched, [(9, 8)])
    run(sched)
    assert s.num_output_tokens == 8 and bm.num_free_blocks == 4


def test_prefix_hits_reduce_prefill_tokens():
    sched, bm = make(manager=PrefixCachingBlockManager, budget=64)
    shared = list(range(1, 13))  # three full blocks
    first = Sequence(0, shared + [40, 41], max_tokens=2)
    sched.add(first)
    run(sched)
    second = Sequence(1, shared + [50, 51, 52], max_tokens=2)
    sched.add(second)
    batch = sched.schedule()
    assert second.num_cached_tokens == 12 and batch.num_new_tokens == [3]
    run(sched)
    assert second.num_output_tokens == 2 and bm.num_free_blocks == bm.num_blocks


def test_identical_block_aligned_prompt_twice():
    sched, bm = make(manager=PrefixCachingBlockManager, budget=64)
    prompt = list(range(1, 9))  # exactly 2 blocks
    a, b = Sequence(0, prompt, max_tokens=3), Sequence(1, prompt, max_tokens=3)
    sched.add(a)
    sched.add(b)
    run(sched)
    c = Sequence(2, prompt, max_tokens=3)
    sched.add(c)
    batch = sched.schedule()
    assert batch.num_new_tokens[0] >= 1 and c.num_cached_tokens <= 4  # the last token is always computed
    run(sched)
    assert a.token_ids == b.token_ids == c.token_ids
    assert bm.num_free_blocks == bm.num_blocks


def test_scheduled_batch_helpers():
    b = ScheduledBatch()
    assert b.is_empty and b.num_batched_tokens == 0 and len(b) == 0 and b.sampling_seqs == []


@st.composite
def workloads(draw):
    block_size = draw(st.sampled_from([1, 2, 4]))
    max_model_len = draw(st.integers(4, 40))
    specs = draw(st.lists(st.tuples(st.integers(1, max_model_len - 1), st.integers(1, 12)), min_size=1, max_size=8))
    specs = [(p, max(1, min(m, max_model_len - p))) for p, m in specs]
    longest = max(p + m for p, m in specs)
    min_blocks = -(-(longest - 1) // block_size)
    num_blocks = draw(st.integers(min_blocks, min_blocks + 12))
    budget = draw(st.integers(1, 48))
    max_num_seqs = draw(st.integers(1, 6))
    manager = draw(st.sampled_from(MANAGERS))
    return block_size, max_model_len, specs, num_blocks, budget, max_num_seqs, manager


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_random_workloads_always_finish_without_leaks(w):
    block_size, max_model_len, specs, num_blocks, budget, max_num_seqs, manager = w
    sched, bm = make(num_blocks, block_size, max_num_seqs, budget, max_model_len, manager=manager)
    seqs = add_all(sched, specs)

    def check(batch):
        assert batch.num_batched_tokens <= budget and len(batch) <= max_num_seqs
        assert len({s.seq_id for s in batch.seqs}) == len(batch)
    run(sched, max_steps=20_000, check=check)
    assert all(s.is_finished and s.num_output_tokens == s.max_tokens for s in seqs)
    assert bm.num_free_blocks == bm.num_blocks


def test_simulation_helpers_record_steps_and_render_state():
    from course.simulate import format_trace, render_snapshot, run_workload, snapshot

    sched, bm = make(num_blocks=8, block_size=4, budget=8, max_model_len=32)
    seqs = [Sequence(i, [i + 1] * p, max_tokens=m) for i, (p, m) in enumerate([(5, 3), (10, 2)])]
    late = Sequence(2, [9, 9], max_tokens=2)
    records = run_workload(sched, {0: seqs, 3: [late]})
    assert records[0].seq_ids == [0, 1] and records[0].num_new_tokens == [5, 3]
    assert records[0].num_prefill_tokens == 8 and records[0].num_decode_tokens == 0
    assert records[1].num_decode_tokens == 1 and records[1].num_prefill_tokens == 7
    assert any(2 in r.seq_ids for r in records if r.step >= 3)
    assert records[-1].num_free_blocks == 8 and records[-1].num_waiting == records[-1].num_running == 0
    assert "step   0 | 0:5 1:3" in format_trace(records)

    sched, _ = make(num_blocks=4, block_size=2)
    a, b = add_all(sched, [(3, 2), (1, 2)])
    sched.schedule()
    snap = snapshot(sched)
    assert [s["id"] for s in snap["running"]] == [0, 1] and snap["waiting"] == []
    assert snap["num_free_blocks"] == 1 and snap["block_owners"] == {0: [0], 1: [0], 2: [1]}
    text = render_snapshot(snap)
    assert "running (2)" in text and "0 0 1 ." in text and "1 of 4 free" in text


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_fast_paths_skip_only_calls_that_would_do_nothing(w):
    """schedule() allocates inline only when a block is due, update() caches only when one filled:
    after every step an explicit allocate / cache_blocks on every running sequence changes nothing."""
    block_size, max_model_len, specs, num_blocks, budget, max_num_seqs, manager = w
    sched, bm = make(num_blocks, block_size, max_num_seqs, budget, max_model_len, manager=manager)
    add_all(sched, specs)

    def check(batch):
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            free, table = bm.num_free_blocks, list(seq.block_table)
            bm.allocate(seq.block_table, seq.num_computed_tokens + n)
            assert seq.block_table == table and bm.num_free_blocks == free

    for _ in range(20_000):
        if not sched.has_unfinished():
            break
        batch = sched.schedule()
        check(batch)
        sched.update(batch, [fake_token(s) if smp else None for s, smp in zip(batch.seqs, batch.samples)])
        if manager is PrefixCachingBlockManager:
            state = (dict(bm._index), dict(bm._cached))
            for seq in sched.running:
                bm.cache_blocks(seq.block_table, seq.token_ids, seq.num_computed_tokens)
            assert (dict(bm._index), dict(bm._cached)) == state
    assert not sched.has_unfinished() and bm.num_free_blocks == bm.num_blocks


def test_a_prompt_that_waits_is_counted_once_by_the_prefix_cache():
    """A lookup for a sequence that then stays waiting is taken back: hit counters count each admission once."""
    sched, bm = make(num_blocks=7, block_size=4, budget=64, max_model_len=40, manager=PrefixCachingBlockManager)
    shared = list(range(1, 13))  # three full blocks
    first = Sequence(0, shared + list(range(40, 47)), max_tokens=4)  # 19 + 4 tokens: 6 blocks at the end
    sched.add(first)
    batch = sched.schedule()
    sched.update(batch, [fake_token(first)])  # prefilled: its first three blocks are cached
    big = Sequence(1, shared + list(range(60, 70)), max_tokens=2)  # 3 cached + 3 new blocks: waits for first
    sched.add(big)
    waited = 0
    while sched.has_unfinished():
        batch = sched.schedule()
        waited += big.status is SequenceStatus.WAITING
        sched.update(batch, [fake_token(s) if x else None for s, x in zip(batch.seqs, batch.samples)])
    assert waited >= 2, "big was meant to wait for a few steps"
    assert bm.query_tokens == first.num_prompt_tokens + big.num_prompt_tokens
    assert bm.hit_tokens == 12  # big's three shared blocks, counted once
    assert bm.num_free_blocks == bm.num_blocks
