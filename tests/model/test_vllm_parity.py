"""vLLM offline-API parity: outputs (finished(), metrics, num_cached_tokens, prompt logprobs), the engine's
add_request / abort_request shape, and the logit-processor SamplingParams, checked against transformers."""
from importlib.util import find_spec

import pytest
import torch
from hf_reference import hf_model

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

# chapter 11's AsyncEngineCore runs these loops one step ahead; until it is exported only the sync loop runs
ASYNC = pytest.param(True, marks=pytest.mark.skipif(find_spec("nanoserve.engine.async_core") is None,
                                                     reason="nanoserve.engine.async_core is not exported yet"))

LOOPS = pytest.mark.parametrize("overlap", [False, ASYNC], ids=["sync", "async"])
PROMPT = [5, 17, 42, 8, 99, 3, 61, 250, 7, 11, 300, 4, 13]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=8, tie_word_embeddings=False,
                                max_position_embeddings=128)


@pytest.fixture(scope="module")
def hf(checkpoint):
    return hf_model(checkpoint)


def make_llm(checkpoint, overlap=False, **kwargs):
    kwargs = {"block_size": 4, "num_kv_blocks": 64, **kwargs}
    return LLM(str(checkpoint), device="cpu", dtype="float32", skip_tokenizer_init=True,
               async_scheduling=overlap, **kwargs)


def hf_logits(hf, ids) -> torch.Tensor:
    """transformers' float32 logits at every position of `ids`: [len(ids), V]."""
    t = torch.tensor([ids])
    with torch.no_grad():
        return hf(t, attention_mask=torch.ones_like(t)).logits[0].float()


def constrained_greedy(hf, prompt, n, edit) -> list:
    """Greedy decoding in transformers where `edit(logits[V], output_so_far)` changes each step's logits."""
    out = []
    for _ in range(n):
        logits = hf_logits(hf, prompt + out)[-1]
        out.append(int(edit(logits.clone(), out).argmax()))
    return out


# ---- outputs ----------------------------------------------------------------------------
def test_completion_finished_is_a_method(checkpoint):
    out = make_llm(checkpoint).generate({"prompt_token_ids": [1, 2]}, SamplingParams(max_tokens=2), use_tqdm=False)[0]
    assert out.finished is True  # RequestOutput.finished is an attribute, as in vLLM
    assert out.outputs[0].finished() is True  # CompletionOutput.finished() is a method, as in vLLM


@LOOPS
def test_metrics_timestamps_are_ordered(checkpoint, overlap):
    outs = make_llm(checkpoint, overlap).generate([{"prompt_token_ids": PROMPT}, {"prompt_token_ids": [1]}],
                                                  SamplingParams(temperature=0, max_tokens=4, ignore_eos=True),
                                                  use_tqdm=False)
    for out in outs:
        m = out.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.last_token_time <= m.finished_time
        assert m.time_in_queue >= 0


def test_num_cached_tokens_counts_prefix_hits(checkpoint):
    llm = make_llm(checkpoint)
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    first = llm.generate({"prompt_token_ids": PROMPT}, params, use_tqdm=False)[0]
    again = llm.generate({"prompt_token_ids": PROMPT}, params, use_tqdm=False)[0]
    assert first.num_cached_tokens == 0
    assert again.num_cached_tokens == 12  # three full blocks of 4; the last token is always computed
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    assert make_llm(checkpoint, enable_prefix_caching=False).generate(
        {"prompt_token_ids": PROMPT}, params, use_tqdm=False)[0].num_cached_tokens == 0


# ---- prompt logprobs --------------------------------------------------------------------
@LOOPS
@pytest.mark.parametrize("budget", [64, 5], ids=["one-chunk", "chunked"])
def test_prompt_logprobs_match_transformers(checkpoint, hf, overlap, budget):
    k = 3
    llm = make_llm(checkpoint, overlap, max_num_batched_tokens=budget, max_num_seqs=4)
    params = SamplingParams(temperature=1.0, seed=0, max_tokens=2, prompt_logprobs=k, n=2)  # greedy takes n=1
    llm.generate({"prompt_token_ids": PROMPT}, SamplingParams(max_tokens=1), use_tqdm=False)  # warm the prefix cache
    out = llm.generate({"prompt_token_ids": PROMPT}, params, use_tqdm=False)[0]
    assert out.num_cached_tokens == 0  # a request that wants prompt logprobs skips the prefix cache (as vLLM)
    want = hf_logits(hf, PROMPT).log_softmax(-1)
    got = out.prompt_logprobs
    assert len(got) == len(PROMPT) and got[0] is None
    for pos in range(1, len(PROMPT)):
        entry, row, token = got[pos], want[pos - 1], PROMPT[pos]
        assert token in entry and len(entry) in (k, k + 1)
        assert entry[token].logprob == pytest.approx(row[token].item(), abs=1e-4)
        assert entry[token].rank == int((row > row[token]).sum()) + 1
        top = row.topk(k)
        for r, (t, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()), start=1):
            assert entry[t].logprob == pytest.approx(v, abs=1e-4) and (t == token or entry[t].rank == r)


def test_prompt_logprobs_come_with_the_first_streamed_delta(checkpoint):
    llm = make_llm(checkpoint)
    deltas = []
    engine = llm.engine
    engine.add_request("p", {"prompt_token_ids": PROMPT}, SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=0))
    while engine.has_unfinished_requests():
        deltas += engine.step()
    assert len(deltas[0].prompt_logprobs) == len(PROMPT)
    assert all(d.prompt_logprobs is None for d in deltas[1:])
    assert all(len(e) == 1 for e in deltas[0].prompt_logprobs[1:])  # k=0: only the prompt's own token


# ---- the engine's vLLM-shaped calls -------------------------------------------------------
def test_add_request_takes_the_id_first_and_abort_takes_a_list(checkpoint):
    engine = make_llm(checkpoint).engine
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    assert engine.add_request("a", [1, 2, 3], params) == "a"
    engine.add_request("b", {"prompt_token_ids": [4, 5]}, params)
    engine.add_request("c", [6], params)
    with pytest.raises(TypeError, match="request_id"):
        engine.add_request([1, 2, 3], params)  # the old order
    engine.step()
    engine.abort_request(["a", "b", "missing"])
    assert not engine.has_request("a") and not engine.has_request("b") and engine.has_request("c")
    engine.abort_request("c")
    assert not engine.has_unfinished_requests()
    assert engine.block_manager.num_free_blocks == engine.num_kv_blocks
    with pytest.raises(TypeError, match="request_id"):
        engine.abort_request(7)


# ---- logit processors ---------------------------------------------------------------------
@LOOPS
def test_logit_bias_and_allowed_token_ids_match_transformers(checkpoint, hf, overlap):
    llm = make_llm(checkpoint, overlap)
    prompt, n = [3, 1, 4, 1, 5], 6
    plain = constrained_greedy(hf, prompt, n, lambda x, out: x)
    bias = {plain[0]: -100.0, 77: 5.0}
    allowed = [9, 10, 11, 12, plain[1]]

    def with_bias(x, out):
        for t, b in bias.items():
            x[t] += b
        return x

    def only_allowed(x, out):
        keep = torch.full_like(x, float("-inf"))
        keep[allowed] = 0
        return x + keep

    outs = llm.generate([{"prompt_token_ids": prompt}] * 2,
                        [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, logit_bias=bias),
                         SamplingParams(temperature=0, max_tokens=n, ignore_eos=True, allowed_token_ids=allowed)],
                        use_tqdm=False)
    assert outs[0].outputs[0].token_ids == constrained_greedy(hf, prompt, n, with_bias)
    assert outs[1].outputs[0].token_ids == constrained_greedy(hf, prompt, n, only_allowed)
    assert set(outs[1].outputs[0].token_ids) <= set(allowed)


def test_logit_processors_keep_logprobs_raw(checkpoint, hf):
    prompt = [3, 1, 4]
    out = make_llm(checkpoint).generate({"prompt_token_ids": prompt},
                                        SamplingParams(temperature=0, max_tokens=1, logprobs=0,
                                                       logit_bias={5: 100.0}), use_tqdm=False)[0]
    c = out.outputs[0]
    assert c.token_ids == [5]
    assert c.logprobs[0][5].logprob == pytest.approx(hf_logits(hf, prompt)[-1].log_softmax(-1)[5].item(), abs=1e-4)


def test_rows_with_processors_or_prompt_logprobs_are_not_plain(checkpoint):
    """SamplingBatch.temperatures (a graph runner's fast path) is set only when every row is plain sampling."""
    llm = make_llm(checkpoint, max_num_seqs=8)
    runner, seen = llm.engine.executor, []
    execute = runner.execute

    def spy(batch, sampling):
        seen.append(sampling.temperatures)
        return execute(batch, sampling)

    runner.execute = spy
    base = dict(temperature=0, max_tokens=4, ignore_eos=True)
    for extra in (dict(logit_bias={1: 1.0}), dict(allowed_token_ids=[1, 2]), dict(prompt_logprobs=1),
                  dict(seed=3, temperature=0.5), dict(top_p=0.9, temperature=0.5), dict(min_tokens=2)):
        seen.clear()
        out = llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(**{**base, **extra}), use_tqdm=False)[0]
        assert len(out.outputs[0].token_ids) == 4
        assert seen[0] is None, extra
    seen.clear()
    llm.generate({"prompt_token_ids": [1, 2, 3]}, SamplingParams(**{**base, "temperature": 0.7}), use_tqdm=False)
    assert seen and all(t == [0.7] for t in seen), "a plain temperature request should offer the fast path"


# ---- bad words, stop strings and special tokens (real Qwen3 tokenizer) ----------------------------
@pytest.fixture(scope="module")
def tok_checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-tok"), seed=4, with_tokenizer=True,
                                tie_word_embeddings=False, max_position_embeddings=128)


@pytest.fixture(scope="module")
def tok_llm(tok_checkpoint):
    return LLM(str(tok_checkpoint), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64)


def _round_trip_run(tok, ids, length):
    """The first `length` consecutive ids whose decoded text encodes back to exactly those ids, and that text."""
    for i in range(len(ids) - length + 1):
        text = tok.decode(ids[i:i + length])
        if text.strip() == text and text and tok.encode(text, add_special_tokens=False) == ids[i:i + length]:
            return ids[i:i + length], text
    return None, None


@LOOPS
@pytest.mark.parametrize("length", [1, 2])
def test_bad_words_are_never_completed(tok_checkpoint, hf_tok, overlap, length):
    llm = LLM(str(tok_checkpoint), device="cpu", dtype="float32", block_size=4, num_kv_blocks=64,
              async_scheduling=overlap)
    tok = llm.get_tokenizer()
    prompt, n = tok.encode("The capital of France is"), 16
    plain = constrained_greedy(hf_tok, prompt, n, lambda x, out: x)
    word_ids, word = _round_trip_run(tok, plain, length)
    assert word is not None, "no round-tripping run of tokens in the greedy output"
    banned_seqs = [word_ids]
    spaced = tok.encode(" " + word, add_special_tokens=False)
    if spaced[0] != word_ids[0] and len(spaced) == len(word_ids):
        banned_seqs.append(spaced)

    def ban(x, out):
        for seq in banned_seqs:
            prefix = seq[:-1]
            if len(prefix) <= len(out) and out[len(out) - len(prefix):] == prefix:
                x[seq[-1]] = float("-inf")
        return x

    got = llm.generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True,
                                                                    bad_words=[word]), use_tqdm=False)[0]
    ids = got.outputs[0].token_ids
    assert ids == constrained_greedy(hf_tok, prompt, n, ban)
    assert all(ids[i:i + length] != word_ids for i in range(len(ids)))


@pytest.fixture(scope="module")
def hf_tok(tok_checkpoint):
    return hf_model(tok_checkpoint)


def test_include_stop_str_in_output(tok_llm):
    base = dict(temperature=0, max_tokens=12, ignore_eos=True)
    full = tok_llm.generate("The capital of France is", SamplingParams(**base), use_tqdm=False)[0].outputs[0].text
    stop = full[5:8]
    cut = full.index(stop)
    for include in (False, True):
        params = SamplingParams(**base, stop=stop, include_stop_str_in_output=include)
        text = tok_llm.generate("The capital of France is", params, use_tqdm=False)[0].outputs[0].text
        streamed = "".join(d.text for d in tok_llm.stream("The capital of France is", params))
        assert text == streamed == (full[:cut + len(stop)] if include else full[:cut])


def test_skip_special_tokens(tok_llm):
    im_end = tok_llm.get_tokenizer().convert_tokens_to_ids("<|im_end|>")
    base = dict(temperature=0, max_tokens=3, ignore_eos=True, allowed_token_ids=[im_end])
    kept = tok_llm.generate("Hi", SamplingParams(**base, skip_special_tokens=False), use_tqdm=False)[0].outputs[0]
    skipped = tok_llm.generate("Hi", SamplingParams(**base), use_tqdm=False)[0].outputs[0]
    assert kept.token_ids == skipped.token_ids == [im_end] * 3
    assert kept.text == "<|im_end|>" * 3 and skipped.text == ""
    streamed = "".join(d.text for d in tok_llm.stream("Hi", SamplingParams(**base, skip_special_tokens=False)))
    assert streamed == "<|im_end|>" * 3
