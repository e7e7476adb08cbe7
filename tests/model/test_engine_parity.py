"""The engine's greedy output equals transformers' greedy generate, under every scheduling pressure."""
import dataclasses

from importlib.util import find_spec

import pytest
import torch
from hf_reference import hf_greedy, hf_model

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

# an untied head keeps random-weight greedy output from collapsing onto the last prompt token
PROMPT_LENS = [1, 3, 8, 13, 21]
MAX_TOKENS = [9, 5, 12, 3, 7]
BLOCK = 4


def prompts_of(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=3, tie_word_embeddings=False,
                                max_position_embeddings=64)


@pytest.fixture(scope="module")
def model(checkpoint):
    return hf_model(checkpoint)


@pytest.fixture(scope="module")
def reference(model):
    """Memoised transformers greedy continuation of (prompt, max_tokens)."""
    cache = {}

    def greedy(prompt, max_tokens):
        key = (tuple(prompt), max_tokens)
        if key not in cache:
            cache[key] = hf_greedy(model, prompt, max_tokens)
        return cache[key]

    return greedy


@pytest.fixture(autouse=True, params=[False, ASYNC], ids=["sync", "async"])
def loop(request, monkeypatch):
    """Every test runs with the step-at-a-time loop and with the one-step-ahead loop (chapter 11)."""
    monkeypatch.setitem(LOOP, "async_scheduling", request.param)
    return request.param


LOOP = {"async_scheduling": False}


def make_llm(checkpoint, **kwargs):
    kwargs = {"skip_tokenizer_init": True, "block_size": BLOCK, "num_kv_blocks": 128, **LOOP, **kwargs}
    return LLM(checkpoint, **kwargs)


def generate(llm, prompts, max_tokens):
    params = [SamplingParams(temperature=0, max_tokens=m) for m in max_tokens]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    assert [o.prompt_token_ids for o in outs] == prompts  # input order
    assert all(o.finished and len(o.outputs) == 1 for o in outs)
    return [o.outputs[0].token_ids for o in outs]


def assert_no_leaks(llm):
    engine = llm.engine
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.num_kv_blocks


def count_preemptions(llm):
    """Wrap the scheduler so the test can see how many sequences were preempted."""
    scheduler, seen = llm.engine.scheduler, []
    schedule = scheduler.schedule

    def spy():
        batch = schedule()
        seen.extend(batch.preempted)
        return batch

    scheduler.schedule = spy
    return seen


@pytest.mark.parametrize("prefix", [False, True], ids=["plain", "prefix-cache"])
def test_greedy_batch_equals_transformers(checkpoint, reference, prefix):
    llm = make_llm(checkpoint, enable_prefix_caching=prefix)
    prompts = prompts_of(PROMPT_LENS)
    got = generate(llm, prompts, MAX_TOKENS)
    assert got == [reference(p, m) for p, m in zip(prompts, MAX_TOKENS)]
    assert_no_leaks(llm)


def test_chunked_prefill_and_preemption_change_nothing(checkpoint, reference):
    prompts = prompts_of(PROMPT_LENS)
    want = [reference(p, m) for p, m in zip(prompts, MAX_TOKENS)]
    chunked = make_llm(checkpoint, max_num_batched_tokens=6, max_num_seqs=5, enable_prefix_caching=False)
    assert generate(chunked, prompts, MAX_TOKENS) == want
    # 8 blocks hold 32 tokens; the longest request needs 21 + 7 - 1 = 27, all together need ~100
    tight = make_llm(checkpoint, num_kv_blocks=8, enable_prefix_caching=False)
    preempted = count_preemptions(tight)
    assert generate(tight, prompts, MAX_TOKENS) == want
    assert preempted, "the cache was meant to be too small for the whole batch"
    assert_no_leaks(tight)
    both = make_llm(checkpoint, num_kv_blocks=8, max_num_batched_tokens=5, max_num_seqs=5,
                    enable_prefix_caching=True)
    assert generate(both, prompts, MAX_TOKENS) == want
    assert_no_leaks(both)


def test_prefix_cache_hits_give_the_same_tokens(checkpoint, reference):
    llm = make_llm(checkpoint, enable_prefix_caching=True)
    g = torch.Generator().manual_seed(5)
    shared = torch.randint(0, 512, (10,), generator=g).tolist()
    exact = torch.randint(0, 512, (2 * BLOCK,), generator=g).tolist()  # exactly k * block_size tokens
    prompts = [shared + [7, 8, 9], shared + [1], exact, exact, shared]
    max_tokens = [6, 4, 5, 5, 8]
    want = [reference(p, m) for p, m in zip(prompts, max_tokens)]
    assert generate(llm, prompts, max_tokens) == want
    assert generate(llm, [exact, shared + [1]], [5, 4]) == [want[2], want[1]]  # hits from a finished call
    bm = llm.engine.block_manager
    assert bm.hit_tokens >= 2 * BLOCK
    assert_no_leaks(llm)
    assert llm.reset_prefix_cache()
    assert generate(llm, [exact], [5]) == [want[2]]
    assert llm.engine.block_manager.hit_tokens == 0  # the cache really was forgotten
    assert_no_leaks(llm)


def test_prompt_plus_max_tokens_equal_to_max_model_len(checkpoint, reference):
    llm = make_llm(checkpoint, max_model_len=24, enable_prefix_caching=False)
    prompt = prompts_of([16], seed=7)[0]
    out = llm.generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0, max_tokens=8), use_tqdm=False)
    assert out[0].outputs[0].token_ids == reference(prompt, 8)
    assert out[0].outputs[0].finish_reason == "length"
    # asking for more is accepted and stops at max_model_len, also with finish_reason "length"
    out = llm.generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0, max_tokens=30), use_tqdm=False)
    assert out[0].outputs[0].token_ids == reference(prompt, 8)
    assert out[0].outputs[0].finish_reason == "length"
    assert_no_leaks(llm)


def test_one_long_sequence_in_a_cache_that_fits_it_exactly(checkpoint, reference):
    prompt = prompts_of([10], seed=8)[0]
    # 10 + 15 tokens, the last one never stored: 24 KV slots = exactly 6 blocks of 4
    for prefix in (False, True):
        llm = make_llm(checkpoint, num_kv_blocks=6, enable_prefix_caching=prefix)
        assert generate(llm, [prompt], [15]) == [reference(prompt, 15)]
        assert generate(llm, [prompt], [15]) == [reference(prompt, 15)]  # again, over cached blocks
        assert_no_leaks(llm)
        with pytest.raises(ValueError, match="KV blocks"):
            generate(llm, [prompt], [16])


def test_many_generate_calls_leak_nothing(checkpoint, reference):
    for prefix in (False, True):
        llm = make_llm(checkpoint, num_kv_blocks=16, enable_prefix_caching=prefix)
        for i in range(6):
            prompts = prompts_of([3 + i, 9, 5 + 2 * i], seed=i)
            max_tokens = [2 + i, 4, 3]
            assert generate(llm, prompts, max_tokens) == [reference(p, m) for p, m in zip(prompts, max_tokens)]
            assert_no_leaks(llm)


def test_seeded_sampling_ignores_batch_mates_and_n(checkpoint):
    llm = make_llm(checkpoint, enable_prefix_caching=True)
    prompt = {"prompt_token_ids": prompts_of([6], seed=9)[0]}
    seeded = SamplingParams(temperature=1.0, top_k=50, seed=1234, max_tokens=10)
    alone = llm.generate(prompt, seeded, use_tqdm=False)[0].outputs[0].token_ids
    others = [{"prompt_token_ids": p} for p in prompts_of([4, 11, 2], seed=10)]
    mixed = llm.generate(others[:2] + [prompt] + others[2:], [SamplingParams(temperature=0.9, max_tokens=12)] * 2
                         + [seeded] + [SamplingParams(temperature=0, max_tokens=3)], use_tqdm=False)
    assert mixed[2].outputs[0].token_ids == alone
    n3 = llm.generate(prompt, dataclasses.replace(seeded, n=3), use_tqdm=False)[0]
    assert [c.index for c in n3.outputs] == [0, 1, 2]
    assert n3.outputs[0].token_ids == alone  # completion 0 keeps the request's seed
    assert len({tuple(c.token_ids) for c in n3.outputs}) == 3
    unseeded = llm.generate(prompt, SamplingParams(n=2, temperature=1.0, max_tokens=10), use_tqdm=False)[0]
    assert unseeded.outputs[0].token_ids != unseeded.outputs[1].token_ids
    assert_no_leaks(llm)


def test_engine_seed_makes_unseeded_runs_repeatable(checkpoint):
    prompt = {"prompt_token_ids": prompts_of([5], seed=11)[0]}
    params = SamplingParams(temperature=1.0, max_tokens=8)
    runs = [make_llm(checkpoint, seed=s).generate(prompt, params, use_tqdm=False)[0].outputs[0].token_ids
            for s in (0, 0, 1)]
    assert runs[0] == runs[1] != runs[2]
