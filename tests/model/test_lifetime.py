"""An LLM's resources end with it: shutdown(), `with LLM(...)` and plain `del` free the engine at once."""
import gc
import os
import weakref

from importlib.util import find_spec

import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
PROMPT = {"prompt_token_ids": [1, 2, 3]}
KV_BLOCKS = 4096  # 8 KiB per 16-token block of the tiny model: 32 MiB of zeroed cache per engine


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("life"), seed=0)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def build(checkpoint, **kwargs):
    return LLM(checkpoint, device="cpu", skip_tokenizer_init=True, block_size=16, num_kv_blocks=KV_BLOCKS, **kwargs)


@pytest.mark.parametrize("async_scheduling", [False, ASYNC], ids=["sync", "async"])
def test_del_frees_the_engine_without_the_cycle_collector(checkpoint, async_scheduling):
    llm = build(checkpoint, async_scheduling=async_scheduling)
    llm.generate(PROMPT, GREEDY, use_tqdm=False)
    stream = llm.stream(PROMPT, GREEDY)
    next(stream)
    stream.close()
    engine = weakref.ref(llm.engine)
    gc.disable()
    try:
        del llm
        assert engine() is None
    finally:
        gc.enable()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_twenty_recreations_keep_rss_flat(checkpoint):
    gc.collect()
    gc.disable()  # a leak through a reference cycle must show, whenever the collector would have run
    try:
        llm = build(checkpoint)
        llm.generate(PROMPT, GREEDY, use_tqdm=False)
        del llm
        start = rss_bytes()
        for _ in range(20):
            llm = build(checkpoint)
            llm.generate(PROMPT, GREEDY, use_tqdm=False)
            del llm
        grown = rss_bytes() - start
    finally:
        gc.enable()
    cache = KV_BLOCKS * 16 * 2 * 2 * 2 * 16 * 4  # blocks x tokens x K,V x layers x kv heads x head_dim x fp32
    assert grown < 3 * cache, f"RSS grew by {grown / 2**20:.0f} MiB over 20 engines"


def test_shutdown_is_idempotent_and_refuses_later_work(checkpoint):
    llm = build(checkpoint)
    llm.generate(PROMPT, GREEDY, use_tqdm=False)
    llm.shutdown()
    llm.shutdown()
    assert llm.engine.executor is None  # the executor (and its KV cache) was released
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate(PROMPT, GREEDY, use_tqdm=False)
    with pytest.raises(RuntimeError, match="shut down"):
        llm.stream(PROMPT, GREEDY)


def test_context_manager_shuts_down_and_ends_open_streams(checkpoint):
    with build(checkpoint) as llm:
        stream = llm.stream(PROMPT, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))
        next(stream)
    assert llm.engine.executor is None
    with pytest.raises(RuntimeError, match="aborted"):
        next(stream)


def test_shutdown_stops_the_executor(checkpoint):
    llm = build(checkpoint)
    calls = []
    executor = llm.engine.executor
    original = executor.shutdown
    executor.shutdown = lambda: (calls.append(1), original())
    llm.shutdown()
    assert calls == [1]


def test_the_start_up_heap_is_frozen_without_its_garbage(checkpoint):
    class Node:
        pass

    gone = weakref.WeakValueDictionary()
    garbage = Node()
    garbage.self = garbage  # a cycle already unreachable when the engine is built: freezing it would keep it
    gone["before"] = garbage
    gc.unfreeze()  # whatever an earlier engine of this process froze
    gc.collect()  # the cycle, still referenced, moves to the oldest generation, which young collections skip
    del garbage
    llm = build(checkpoint)
    assert gc.get_freeze_count() > len(gc.get_objects())  # a full collection walks only what came after the start
    node = Node()
    node.self = node  # a cycle made after the freeze: only the cycle collector frees it
    gone["after"] = node
    del node
    gc.collect()
    assert not gone
    probe = weakref.ref(llm.engine.core)
    assert llm.generate(PROMPT, GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    del llm
    assert probe() is None  # frozen objects are still freed by reference counting
