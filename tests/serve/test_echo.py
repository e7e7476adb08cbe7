"""echo and prompt_logprobs on /v1/completions, as lm-evaluation-harness's loglikelihood requests use them."""
import math

import httpx

from conftest import MODEL_NAME

PROMPT = [9707, 11, 1879, 0]  # "Hello, world!"


def complete(server, **body):
    r = httpx.post(server + "/v1/completions", json={"model": MODEL_NAME, "temperature": 0, **body}, timeout=60,
                   trust_env=False)
    assert r.status_code == 200, r.text
    return r.json()


def test_echo_puts_the_prompt_before_the_output(server):
    plain = complete(server, prompt="Hello, world!", max_tokens=3)["choices"][0]
    echoed = complete(server, prompt="Hello, world!", max_tokens=3, echo=True)["choices"][0]
    assert echoed["text"] == "Hello, world!" + plain["text"]
    assert complete(server, prompt=PROMPT, max_tokens=1, echo=True)["choices"][0]["text"].startswith("Hello, world!")


def test_echo_with_logprobs_scores_the_prompt_first_token_none(server):
    r = complete(server, prompt=PROMPT, max_tokens=1, echo=True, logprobs=1)
    lp = r["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(PROMPT) + 1 and "".join(lp["tokens"][:4]) == "Hello, world!"
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:])
    assert all(len(top) >= 1 for top in lp["top_logprobs"][1:])
    assert lp["text_offset"][:4] == [0, 5, 6, 12] and r["usage"]["completion_tokens"] == 1


def test_echoed_logprobs_are_the_engines_prompt_logprobs(server, tiny_model_dir):
    from nanoserve.llm import LLM
    from nanoserve.sampling import SamplingParams

    scored = complete(server, prompt=PROMPT, max_tokens=0, echo=True, logprobs=0)["choices"][0]["logprobs"]
    llm = LLM(str(tiny_model_dir), device="cpu", max_model_len=64, num_kv_blocks=16)
    offline = llm.generate([{"prompt_token_ids": PROMPT}], SamplingParams(max_tokens=1, prompt_logprobs=0),
                           use_tqdm=False)[0].prompt_logprobs
    expected = [entry[token].logprob for token, entry in zip(PROMPT[1:], offline[1:])]
    assert all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(scored["token_logprobs"][1:], expected))
    assert len(scored["token_logprobs"]) == len(PROMPT)


def test_max_tokens_0_with_echo_is_the_prompt_alone(server):
    r = complete(server, prompt=PROMPT, max_tokens=0, echo=True, logprobs=2)
    choice = r["choices"][0]
    assert choice["text"] == "Hello, world!" and len(choice["logprobs"]["tokens"]) == len(PROMPT)
    assert r["usage"] == {"prompt_tokens": 4, "completion_tokens": 0, "total_tokens": 4}


def test_prompt_logprobs_field_as_vllm_sends_it(server):
    choice = complete(server, prompt=PROMPT, max_tokens=1, prompt_logprobs=2)["choices"][0]
    entries = choice["prompt_logprobs"]
    assert len(entries) == len(PROMPT) and entries[0] is None
    for token, entry in zip(PROMPT[1:], entries[1:]):
        assert str(token) in entry and 2 <= len(entry) <= 3
        assert all({"logprob", "rank", "decoded_token"} == set(v) for v in entry.values())
    assert complete(server, prompt=PROMPT, max_tokens=1)["choices"][0]["prompt_logprobs"] is None


def test_echo_refusals_name_the_field(server):
    def error(route, body):
        r = httpx.post(server + route, json={"model": MODEL_NAME, **body}, timeout=30, trust_env=False)
        assert r.status_code == 400, r.text
        return r.json()["error"]["param"]

    assert error("/v1/completions", {"prompt": "x", "echo": True, "stream": True}) == "echo"
    assert error("/v1/completions", {"prompt": "x", "prompt_logprobs": 1, "stream": True}) == "prompt_logprobs"
    assert error("/v1/completions", {"prompt": "x", "max_tokens": 0}) == "max_tokens"  # without echo, as before
    chat = {"messages": [{"role": "user", "content": "hi"}], "echo": True}
    assert error("/v1/chat/completions", chat) == "echo"
