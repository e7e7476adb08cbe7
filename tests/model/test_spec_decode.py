"""Speculative decoding (chapter 18) through the public API: greedy output equal to the engine's without speculation
(itself equal to transformers') across batches, chunked prefill, preemption and prefix hits; stop rules, logprobs,
seeds; sampling that keeps the target distribution; the door's refusals."""
import collections

import pytest

from nanoserve import LLM, SamplingParams
from nanoserve.engine.scheduler import SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.engine.spec_decode import NgramProposer, SpecScheduler, SpeculativeConfig
from nanoserve.kv.prefix import PrefixCachingBlockManager
from nanoserve.model.tiny import make_tiny_checkpoint

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
TIGHT = dict(device="cpu", skip_tokenizer_init=True, block_size=16, num_kv_blocks=20, max_num_batched_tokens=48, max_num_seqs=8, max_model_len=256, seed=0)
PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [11, 12, 13, 11, 12, 13, 11], list(range(20, 80)) + list(range(20, 30)),
           list(range(100, 140)), [7] * 30, list(range(20, 80)) + [1, 2, 3]]  # the last shares 60 tokens with the third


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random Qwen3 with a 512-token vocabulary: fast enough for thousands of sampled rows."""
    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("spec"), seed=2))


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory):
    """The same shapes with Qwen3's tokenizer and vocabulary, for stop strings."""
    return str(make_tiny_checkpoint(tmp_path_factory.mktemp("spec_text"), seed=2, with_tokenizer=True))


def _ids(outs):
    return [o.outputs[0].token_ids for o in outs]


def _run(path, params, prompts=PROMPTS, **extra):
    llm = LLM(path, **{**TIGHT, **extra})  # prompts as token ids
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return llm, outs


@pytest.mark.parametrize("overlap, core_name", [(False, "SpecDecodeCore"), (True, "OverlappedSpecDecodeCore")])
def test_greedy_equals_plain_engine_with_chunks_preemption_and_prefix_hits(tiny, overlap, core_name):
    greedy = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    _, want = _run(tiny, greedy)
    llm, got = _run(tiny, greedy, speculative_config=SPEC, async_scheduling=overlap)
    assert _ids(got) == _ids(want)
    core = llm.llm_engine.core
    assert type(core).__name__ == core_name
    assert core.scheduler.num_preemptions > 0, "the tight pool should preempt"
    assert core.scheduler.block_manager.hit_tokens > 0, "the shared prefix should hit the cache"
    s = core.stats
    assert 0 < s.num_accepted_tokens <= s.num_draft_tokens and s.num_drafts > 0
    assert sum(s.num_accepted_tokens_per_pos) == s.num_accepted_tokens
    assert core.scheduler.block_manager.num_used_blocks == 0, "every block went back"


def test_fewer_steps_than_plain_decoding(tiny):
    greedy = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    plain, _ = _run(tiny, greedy, prompts=PROMPTS[:1])
    spec, _ = _run(tiny, greedy, prompts=PROMPTS[:1], speculative_config=SPEC)
    assert spec.llm_engine.stats.num_steps < plain.llm_engine.stats.num_steps


def test_stop_tokens_max_tokens_and_stop_strings_leave_nothing_past_the_stop(tiny_text):
    # the plain engine's greedy output, then a stop token taken from the middle of it
    greedy = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    _, plain = _run(tiny_text, greedy, prompts=PROMPTS[:2], skip_tokenizer_init=False)
    stop_id, text = plain[0].outputs[0].token_ids[10], plain[0].outputs[0].text
    stop_text = text[len(text) // 2:len(text) // 2 + 3]
    assert stop_text
    for params in [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop_token_ids=[stop_id]),
                   SamplingParams(temperature=0, max_tokens=7, ignore_eos=True),
                   SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=[stop_text])]:
        _, want = _run(tiny_text, params, prompts=PROMPTS[:2], skip_tokenizer_init=False)
        _, got = _run(tiny_text, params, prompts=PROMPTS[:2], skip_tokenizer_init=False, speculative_config=SPEC)
        for w, g in zip(want, got):
            assert g.outputs[0].token_ids == w.outputs[0].token_ids
            assert (g.outputs[0].finish_reason, g.outputs[0].stop_reason) == (w.outputs[0].finish_reason,
                                                                              w.outputs[0].stop_reason)
            assert g.outputs[0].text == w.outputs[0].text


def test_logprobs_for_every_emitted_token(tiny):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=3)
    _, want = _run(tiny, params, prompts=PROMPTS[:3])
    _, got = _run(tiny, params, prompts=PROMPTS[:3], speculative_config=SPEC)
    for w, g in zip(want, got):
        assert g.outputs[0].token_ids == w.outputs[0].token_ids
        assert len(g.outputs[0].logprobs) == len(g.outputs[0].token_ids)
        for a, b, token in zip(w.outputs[0].logprobs, g.outputs[0].logprobs, g.outputs[0].token_ids):
            assert set(a) == set(b) and token in b
            assert abs(a[token].logprob - b[token].logprob) < 1e-4
        assert g.outputs[0].cumulative_logprob == pytest.approx(w.outputs[0].cumulative_logprob, abs=1e-3)


def test_seeded_sampling_is_reproducible(tiny):
    params = SamplingParams(temperature=0.8, top_k=20, max_tokens=24, ignore_eos=True, seed=7)
    _, first = _run(tiny, params, prompts=PROMPTS[:3], speculative_config=SPEC)
    _, second = _run(tiny, params, prompts=PROMPTS[:3], speculative_config=SPEC)
    assert _ids(first) == _ids(second)


def test_sampling_keeps_the_target_distribution(tiny):
    """Generated tokens 2 and 3 over 2,000 seeds, with and without speculation. Token 2 is the first a verify step
    decides; it is drawn with the seed's next noise either way, so it must agree seed by seed. Token 3 comes from
    different draws, so only its distribution can agree: total variation < 0.08 (about twice the noise of 2,000
    draws over this many tokens). A verifier that accepted every draft would fail both by far."""
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7, 8]  # repetitive: every decode step carries a proposal
    params = [SamplingParams(temperature=1.0, top_k=4, max_tokens=3, ignore_eos=True, seed=s) for s in range(2000)]

    def tokens(**extra):
        llm = LLM(tiny, device="cpu", skip_tokenizer_init=True, max_model_len=64, max_num_seqs=256, num_kv_blocks=600,
                  seed=0, **extra)
        outs = llm.generate([{"prompt_token_ids": prompt}] * len(params), params, use_tqdm=False)
        return [o.outputs[0].token_ids for o in outs], llm

    want, _ = tokens()
    got, llm = tokens(speculative_config=SPEC)
    assert llm.llm_engine.stats.num_draft_tokens > 0
    assert sum(w[1] == g[1] for w, g in zip(want, got)) >= 0.99 * len(params)
    third_want, third_got = collections.Counter(w[2] for w in want), collections.Counter(g[2] for g in got)
    tv = 0.5 * sum(abs(third_want[k] - third_got[k]) for k in set(third_want) | set(third_got)) / len(params)
    assert tv < 0.08, (tv, third_want.most_common(5), third_got.most_common(5))


def test_door_refuses_bad_configs_by_name(tiny):
    for bad, field in [({"num_speculative_tokens": 0}, "num_speculative_tokens"),
                       ({"num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
                        "prompt_lookup_min"),
                       ({"method": "eagle", "num_speculative_tokens": 2}, "method"),
                       ({"num_speculative_tokens": 2, "model": "x"}, "model"),
                       ({}, "num_speculative_tokens"), ("{not json", "JSON"), (["ngram"], "speculative_config")]:
        with pytest.raises((TypeError, ValueError), match=field):
            LLM(tiny, device="cpu", skip_tokenizer_init=True, max_model_len=64, speculative_config=bad)
    llm = LLM(tiny, device="cpu", skip_tokenizer_init=True, max_model_len=64,
              speculative_config='{"num_speculative_tokens": 2}')
    assert llm.llm_engine.config.speculative_config == SpeculativeConfig(2, 5, 5)


def test_overlapped_core_takes_turns_on_real_text_and_equals_the_plain_engine():
    """On real text some steps propose and some do not: the overlapped core launches the second kind one step ahead
    and verifies the first kind synchronously, and its greedy output is the plain engine's, with preemption."""
    from course.real_model import smollm2_gguf

    path = smollm2_gguf(quiet=True)
    if path is None:
        pytest.skip("SmolLM2-135M-Instruct is not in the cache (run `python -m course.real_model`)")
    prompts = ["Repeat exactly: the quick brown fox jumps over the lazy dog near the river bank.",
               "The capital of France is", "def fibonacci(n):", "Write a short poem about the sea."]
    tight = dict(device="cpu", block_size=4, num_kv_blocks=24, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=256, seed=0)
    greedy = SamplingParams(temperature=0, max_tokens=32)
    want = LLM(str(path), **tight).generate(prompts, greedy, use_tqdm=False)
    llm = LLM(str(path), **tight, speculative_config=dict(SPEC, num_speculative_tokens=8, prompt_lookup_min=2),
              async_scheduling=True)
    got = llm.generate(prompts, greedy, use_tqdm=False)
    assert _ids(got) == _ids(want)
    core = llm.llm_engine.core
    assert core.launched > 0 and core.verified > 0 and core.stats.num_drafts > 0
    assert core.scheduler.num_preemptions > 0, "the tight pool should preempt"
    assert core.scheduler.block_manager.num_used_blocks == 0


def test_overlapped_core_searches_once_for_a_step_it_verifies_at_once(tiny):
    """A step verified as soon as it is scheduled reuses the proposals that chose it; only a step deferred behind the
    one in flight proposes again (its history gains the token in flight)."""
    llm = LLM(tiny, **TIGHT, speculative_config=SPEC, async_scheduling=True)
    core, calls = llm.llm_engine.core, collections.Counter()
    propose, verify, step = core.propose, core.verify, core.step

    def counted_verify(batch, proposed=None):
        calls["verify, proposals given" if proposed else "verify, proposing"] += 1
        return verify(batch, proposed)

    def counted_step():
        calls["deferred steps"] += core.deferred is not None
        return step()
    core.propose = lambda batch: calls.update(["propose"]) or propose(batch)
    core.verify, core.step = counted_verify, counted_step
    want = _ids(_run(tiny, SamplingParams(temperature=0, max_tokens=48, ignore_eos=True))[1])
    got = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], SamplingParams(temperature=0, max_tokens=48,
                                                                                   ignore_eos=True), use_tqdm=False)
    assert _ids(got) == want
    assert calls["verify, proposals given"] > 0 and calls["verify, proposing"] == calls["deferred steps"]
    assert calls["verify, proposals given"] + calls["verify, proposing"] == core.verified


def test_proposer_prefers_the_longest_match():
    proposer = NgramProposer(3, 1, 3)
    assert proposer.propose([1, 2, 3, 9, 2, 3, 8, 1, 2, 3]) == [9, 2, 3]  # "1 2 3" beats the newer "2 3"
    assert proposer.propose([4, 5, 6]) == []
    assert NgramProposer(2, 2, 2).propose([1, 2, 3, 4, 1, 2]) == [3, 4]


def test_rejected_drafts_give_their_blocks_back_and_are_never_hashed():
    blocks = PrefixCachingBlockManager(num_blocks=8, block_size=4)
    sched = SpecScheduler(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64), blocks)
    seq = Sequence("s", [10, 11, 12, 13, 14, 15], max_tokens=20)
    sched.add(seq)
    sched.update(sched.schedule(), [16])
    batch = sched.schedule()
    drafts = sched.add_drafts(batch, [[17, 18, 19, 20, 21, 22]])
    assert batch.num_new_tokens == [7] and len(seq.block_table) == 4
    finished, committed = sched.update_verified(batch, drafts, [[17, 99]])  # one accepted, then the model's own
    assert (finished, committed) == ([], [2]) and seq.token_ids[6:] == [16, 17, 99]
    assert seq.num_computed_tokens == 8 and len(seq.block_table) == 3  # positions 0-7 kept; block 3 returned
    assert blocks.num_cached_blocks == 2  # two full blocks of real tokens; the rejected 18-22 were never hashed
    # a proposal longer than max_tokens allows is trimmed
    short = Sequence("t", [1, 2, 3], max_tokens=3)
    sched.add(short)
    sched.update(sched.schedule(), [0, 4])
    batch = sched.schedule()
    drafts = sched.add_drafts(batch, [[], [5, 6, 7, 8]])
    assert drafts[1] == [5]  # one generated, one draft, one of the model's own: three in all
