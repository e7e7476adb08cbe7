"""Stop tokens, stop strings, min_tokens, eos, text and streaming on a tiny model with the Qwen3 tokenizer."""
from importlib.util import find_spec

import pytest
import torch

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

PROMPT = "The quick brown fox"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tok"), seed=4, with_tokenizer=True,
                                tie_word_embeddings=False, max_position_embeddings=128)


@pytest.fixture(scope="module", params=[False, ASYNC], ids=["sync", "async"])
def llm(checkpoint, request):
    """The step-at-a-time loop and the one-step-ahead loop (chapter 11) must stop in the same places."""
    return LLM(checkpoint, block_size=4, num_kv_blocks=64, seed=0, async_scheduling=request.param)


def sampled(**kwargs):
    return SamplingParams(temperature=1.0, seed=21, **kwargs)


@pytest.fixture(scope="module")
def free_run(llm):
    """A 24-token seeded run with no stop conditions: the yardstick the stops are cut from."""
    out = llm.generate(PROMPT, sampled(max_tokens=24), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 24
    return out


def test_text_is_the_decoded_tokens(llm, free_run):
    tok = llm.get_tokenizer()
    assert free_run.text == tok.decode(free_run.token_ids, skip_special_tokens=True)
    out = llm.generate(PROMPT, sampled(max_tokens=24), use_tqdm=False)[0]
    assert out.prompt == PROMPT and out.prompt_token_ids == tok.encode(PROMPT)


def test_stop_token_ids(llm, free_run):
    target = free_run.token_ids[5]
    first = free_run.token_ids.index(target)
    out = llm.generate(PROMPT, sampled(max_tokens=24, stop_token_ids=[target]), use_tqdm=False)[0].outputs[0]
    assert out.token_ids == free_run.token_ids[: first + 1]  # the stop token is kept in token_ids
    assert (out.finish_reason, out.stop_reason) == ("stop", target)


def test_min_tokens_masks_stop_tokens(llm, free_run):
    target = free_run.token_ids[0]
    out = llm.generate(PROMPT, sampled(max_tokens=6, min_tokens=6, stop_token_ids=[target]),
                       use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 6 and target not in out.token_ids and out.finish_reason == "length"


def test_eos_stops_unless_ignored(llm, free_run):
    engine = llm.engine
    saved = engine.eos_token_ids
    try:
        engine.eos_token_ids = {free_run.token_ids[3]}  # pretend this token is the model's eos
        first = free_run.token_ids.index(free_run.token_ids[3])
        out = llm.generate(PROMPT, sampled(max_tokens=24), use_tqdm=False)[0].outputs[0]
        assert out.token_ids == free_run.token_ids[: first + 1]
        assert (out.finish_reason, out.stop_reason) == ("stop", None)
        out = llm.generate(PROMPT, sampled(max_tokens=24, ignore_eos=True), use_tqdm=False)[0].outputs[0]
        assert out.token_ids == free_run.token_ids
        # eos on the very last allowed token is a stop, not a length finish
        out = llm.generate(PROMPT, sampled(max_tokens=first + 1), use_tqdm=False)[0].outputs[0]
        assert out.finish_reason == "stop"
    finally:
        engine.eos_token_ids = saved


def test_stop_string_truncates_text(llm, free_run):
    text = free_run.text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    cut = text.index(stop)
    out = llm.generate(PROMPT, sampled(max_tokens=24, stop=["\x00never", stop]), use_tqdm=False)[0].outputs[0]
    assert out.text == text[:cut]
    assert (out.finish_reason, out.stop_reason) == ("stop", stop)
    assert out.token_ids == free_run.token_ids[: len(out.token_ids)]
    tok = llm.get_tokenizer()
    assert stop in tok.decode(out.token_ids, skip_special_tokens=True)  # the stopping token is kept


def test_streaming_deltas_add_up(llm, free_run):
    deltas = list(llm.stream(PROMPT, sampled(max_tokens=24)))
    assert "".join(d.text for d in deltas) == free_run.text
    assert [t for d in deltas for t in d.token_ids] == free_run.token_ids
    assert deltas[-1].finish_reason == "length" and all(d.finish_reason is None for d in deltas[:-1])
    # a stop string is never streamed, not even its first characters
    stop = free_run.text[10:14]
    streamed = "".join(d.text for d in llm.stream(PROMPT, sampled(max_tokens=24, stop=stop)))
    assert streamed == free_run.text[: free_run.text.index(stop)]


def test_abandoned_stream_frees_its_blocks(llm):
    stream = llm.stream(PROMPT, sampled(max_tokens=24))
    next(stream)
    stream.close()
    assert not llm.engine.has_unfinished_requests()
    assert llm.engine.block_manager.num_free_blocks == llm.engine.num_kv_blocks


def test_chat_uses_the_template(llm):
    messages = [{"role": "user", "content": "Hi!"}]
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)[0]
    assert out.prompt.startswith("<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
    assert len(out.outputs[0].token_ids) == 3
    two = llm.chat([messages, messages], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert [o.outputs[0].token_ids for o in two] == [out.outputs[0].token_ids] * 2
