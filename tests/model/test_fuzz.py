"""Anything the door accepts runs to completion: hypothesis over SamplingParams and prompts, small KV pool."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

TINY_FLOATS = st.sampled_from([5e-324, 1e-320, 1e-50, 1e-6, 1e-5])
HUGE_FLOATS = st.sampled_from([1e5, 1e30, 1e300, float("inf"), float("nan")])


def edgy(low, high):
    """Ordinary floats in [low, high] plus the extremes a client might send."""
    return st.one_of(st.floats(low, high), TINY_FLOATS, HUGE_FLOATS, st.sampled_from([0.0, -1e-30, -1.0]))


sampling_kwargs = st.fixed_dictionaries({}, optional={
    "n": st.integers(0, 3),
    "temperature": edgy(0, 3),
    "top_p": edgy(0, 1),
    "top_k": st.one_of(st.integers(-2, 600), st.sampled_from([2**31, 2**63, 2**64, 10**30])),
    "min_p": edgy(0, 1),
    "seed": st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1), st.sampled_from([2**64, -(2**63) - 1])),
    "max_tokens": st.integers(0, 24),
    "min_tokens": st.integers(0, 10),
    "stop": st.one_of(st.none(), st.lists(st.text(min_size=0, max_size=3), max_size=3)),
    "stop_token_ids": st.one_of(st.none(), st.lists(st.integers(-1, 1000), max_size=3)),
    "ignore_eos": st.booleans(),
    "logprobs": st.one_of(st.none(), st.integers(-1, 25)),
    "repetition_penalty": edgy(0, 3),
    "presence_penalty": edgy(-2.5, 2.5),
    "frequency_penalty": edgy(-2.5, 2.5),
})
prompts = st.one_of(st.lists(st.integers(-1, 520), min_size=0, max_size=40).map(lambda ids: {"prompt_token_ids": ids}),
                    st.text(alphabet="0123456789 ", max_size=40))  # digits encode to single ids < 512


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    ckpt = make_tiny_checkpoint(tmp_path_factory.mktemp("fuzz"), seed=1, with_tokenizer=True, vocab_size=512,
                                max_position_embeddings=64)
    # 14 blocks of 4 tokens: a few long requests together must preempt
    llm = LLM(ckpt, device="cpu", block_size=4, num_kv_blocks=14, max_num_batched_tokens=16, max_num_seqs=8)
    yield llm
    llm.shutdown()


def accepted(kwargs):
    try:
        return SamplingParams(**kwargs)
    except (TypeError, ValueError):
        return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(prompts, sampling_kwargs), min_size=1, max_size=3))
def test_what_the_door_accepts_completes(llm, batch):
    requests = [(p, accepted(kw)) for p, kw in batch]
    requests = [(p, sp) for p, sp in requests if sp is not None]
    if not requests:
        return
    engine = llm.engine
    good = []
    for prompt, sp in requests:  # the engine's own door: prompt, stop tokens, lengths
        try:
            engine.process_request(prompt, sp)
        except (TypeError, ValueError):
            continue
        good.append((prompt, sp))
    if good:
        outs = llm.generate([p for p, _ in good], [sp for _, sp in good], use_tqdm=False)
        for out, (_, sp) in zip(outs, good):
            assert out.finished and len(out.outputs) == sp.n
            for c in out.outputs:
                assert c.finish_reason in ("stop", "length")
                assert 1 <= len(c.token_ids) <= sp.max_tokens or c.finish_reason == "stop"
                assert all(0 <= t < engine.vocab_size for t in c.token_ids)
                if sp.logprobs is not None:
                    assert len(c.logprobs) == len(c.token_ids)
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.num_kv_blocks
