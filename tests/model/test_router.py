"""Many consumers, one engine: streams, generate calls and threads share it and every request gets its tokens."""
import threading

from importlib.util import find_spec

import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
P1, P2 = {"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4, 5, 6, 7, 8]}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("router"), seed=0)


@pytest.fixture(scope="module", params=[False, ASYNC], ids=["sync", "async"])
def llm(checkpoint, request):
    llm = LLM(checkpoint, device="cpu", skip_tokenizer_init=True, block_size=4, num_kv_blocks=96,
              async_scheduling=request.param)
    yield llm
    llm.shutdown()


@pytest.fixture(scope="module")
def reference(llm):
    """Each prompt run alone."""
    return [llm.generate(p, GREEDY, use_tqdm=False)[0].outputs[0].token_ids for p in (P1, P2)]


def run_guarded(fn, seconds=60):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not return in time."""
    result, errors = [], []
    thread = threading.Thread(target=lambda: _capture(fn, result, errors), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the consumer hung"
    if errors:
        raise errors[0]
    return result[0]


def _capture(fn, result, errors):
    try:
        result.append(fn())
    except BaseException as e:  # re-raised in the test's thread
        errors.append(e)


def tokens(stream) -> list:
    return [t for delta in stream for t in delta.token_ids]


def assert_no_blocks_held(llm):
    engine = llm.engine
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.num_kv_blocks


def test_interleaved_streams_each_get_all_their_tokens(llm, reference):
    def interleave():
        a, b = llm.stream(P1, GREEDY), llm.stream(P2, GREEDY)
        got_a, got_b = [], []
        for da, db in zip(a, b):
            got_a += da.token_ids
            got_b += db.token_ids
        return got_a + tokens(a), got_b + tokens(b)

    assert run_guarded(interleave) == tuple(reference)
    assert_no_blocks_held(llm)


def test_a_stream_resumed_after_generate_finishes(llm, reference):
    def resume():
        stream = llm.stream(P1, GREEDY)
        first = next(stream).token_ids
        middle = llm.generate(P2, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
        return first + tokens(stream), middle

    assert run_guarded(resume) == tuple(reference)
    assert_no_blocks_held(llm)


def test_generate_while_a_stream_is_open_gets_complete_outputs(llm, reference):
    def both():
        stream = llm.stream(P1, GREEDY)
        next(stream)
        out = llm.generate([P2, P1], [GREEDY, SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)],
                           use_tqdm=False)
        stream.close()
        return [o.outputs[0].token_ids for o in out]

    assert run_guarded(both) == [reference[1], reference[0][:5]]
    assert_no_blocks_held(llm)


def test_a_stream_kept_after_an_exception_can_resume_or_be_dropped(llm, reference):
    def keep_after_error():
        stream = llm.stream(P1, GREEDY)
        got = []
        with pytest.raises(KeyError):
            for delta in stream:
                got += delta.token_ids
                raise KeyError("consumer bug")
        other = llm.generate(P2, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
        return got + tokens(stream), other

    assert run_guarded(keep_after_error) == tuple(reference)
    assert_no_blocks_held(llm)


def test_an_abandoned_stream_frees_its_blocks(llm):
    stream = llm.stream(P1, GREEDY)
    next(stream)
    assert llm.engine.block_manager.num_free_blocks < llm.engine.num_kv_blocks
    del stream  # garbage-collected unfinished: its request is aborted
    assert_no_blocks_held(llm)
    unstarted = llm.stream(P1, GREEDY)  # never started: holds nothing
    assert not llm.engine.has_unfinished_requests()
    del unstarted


def test_fifty_streams_from_threads_match_a_sequential_run(llm, reference):
    results = {}

    def consume(i):
        results[i] = tokens(llm.stream(P1 if i % 2 else P2, GREEDY))

    def crowd():
        threads = [threading.Thread(target=consume, args=(i,)) for i in range(50)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    run_guarded(crowd, seconds=120)
    assert len(results) == 50
    assert all(results[i] == reference[0 if i % 2 else 1] for i in range(50))
    assert_no_blocks_held(llm)


def test_streams_and_generate_calls_from_threads_together(llm, reference):
    outputs = {}

    def stream_worker(i):
        outputs[("s", i)] = tokens(llm.stream(P1, GREEDY))

    def generate_worker(i):
        outputs[("g", i)] = [o.outputs[0].token_ids for o in llm.generate([P2, P1], GREEDY, use_tqdm=False)]

    def crowd():
        threads = [threading.Thread(target=stream_worker, args=(i,)) for i in range(6)]
        threads += [threading.Thread(target=generate_worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    run_guarded(crowd, seconds=120)
    assert all(outputs[("s", i)] == reference[0] for i in range(6))
    assert all(outputs[("g", i)] == [reference[1], reference[0]] for i in range(6))
    assert_no_blocks_held(llm)


def test_an_aborted_request_ends_its_consumer_with_an_error(checkpoint):
    with LLM(checkpoint, device="cpu", skip_tokenizer_init=True, block_size=4, num_kv_blocks=32) as llm:
        stream = llm.stream(P1, GREEDY)
        next(stream)
        llm.engine.abort_request("0")  # behind the router's back
        with pytest.raises(RuntimeError, match="aborted"):
            run_guarded(lambda: tokens(stream))
        assert_no_blocks_held(llm)
