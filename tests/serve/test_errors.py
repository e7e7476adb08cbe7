"""Bad requests get HTTP 400 (unknown model: 404) with OpenAI's error shape, naming the field at fault."""
import httpx
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME

COMPLETION = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 4}
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

CASES = [
    ("/v1/completions", {**COMPLETION, "temperature": -1}, "temperature"),
    ("/v1/completions", {**COMPLETION, "top_p": 0}, "top_p"),
    ("/v1/completions", {**COMPLETION, "n": 0}, "n"),
    ("/v1/completions", {**COMPLETION, "max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {**COMPLETION, "max_tokens": "4"}, "max_tokens"),
    ("/v1/completions", {**COMPLETION, "logprobs": 50}, "logprobs"),
    ("/v1/completions", {**COMPLETION, "top_k": -2}, "top_k"),
    ("/v1/completions", {**COMPLETION, "min_tokens": 9}, "min_tokens"),
    ("/v1/completions", {**COMPLETION, "repetition_penalty": 0}, "repetition_penalty"),
    ("/v1/completions", {**COMPLETION, "echo": True, "stream": True}, "echo"),  # echo itself is served
    ("/v1/completions", {**COMPLETION, "cache_salt": "s"}, "cache_salt"),
    ("/v1/completions", {k: v for k, v in COMPLETION.items() if k != "prompt"}, "prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": [[1, 2], 3]}, "prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": [10**9]}, "prompt"),
    ("/v1/completions", {**COMPLETION, "prompt": [1] * MAX_MODEL_LEN}, "input_tokens"),  # vLLM's parameter
    ("/v1/completions", {**COMPLETION, "stream_options": {"include_usage": True}}, "stream_options"),
    ("/v1/chat/completions", {**CHAT, "messages": []}, "messages"),
    ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {**CHAT, "logprobs": 3}, "logprobs"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": -1}, "max_completion_tokens"),
]


@pytest.mark.parametrize("route,body,param", CASES, ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_bad_request_is_a_400_naming_the_field(server, route, body, param):
    r = httpx.post(server + route, json=body, timeout=30, trust_env=False)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert error["param"] == param and error["message"]


# a grammar beside a rule whose mask can leave it no token: SamplingParams refuses the pair, naming both fields
GRAMMAR_CLASHES = [
    ("/v1/completions", {**COMPLETION, "allowed_token_ids": [5], "structured_outputs": {"regex": "[0-9]+"}},
     "allowed_token_ids"),
    ("/v1/chat/completions", {**CHAT, "allowed_token_ids": [5], "structured_outputs": {"choice": ["yes", "no"]}},
     "allowed_token_ids"),
    ("/v1/chat/completions", {**CHAT, "bad_words": ["yes"], "structured_outputs": {"choice": ["yes", "no"]}},
     "bad_words"),
    ("/v1/chat/completions", {**CHAT, "allowed_token_ids": [5], "response_format": {"type": "json_object"}},
     "allowed_token_ids"),
    ("/v1/completions", {**COMPLETION, "min_tokens": 3, "guided_choice": ["yes", "no"]}, "min_tokens"),
]


@pytest.mark.parametrize("route,body,param", GRAMMAR_CLASHES, ids=[f"{c[2]}-{i}" for i, c in enumerate(GRAMMAR_CLASHES)])
def test_a_grammar_beside_a_rule_that_can_break_it_is_a_400_naming_the_field(server, route, body, param):
    pytest.importorskip("llguidance")
    r = httpx.post(server + route, json=body, timeout=30, trust_env=False)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["message"].startswith(f"{param} cannot be combined with structured_outputs"), error["message"]


def test_body_that_is_not_json_is_a_400(server):
    r = httpx.post(server + "/v1/completions", content=b"{not json", timeout=30, trust_env=False,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError"


def test_unknown_model_is_a_404(client, server):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.NotFoundError) as info:
        client.completions.create(model="no-such-model", prompt="Hello", max_tokens=2)
    assert info.value.body["param"] == "model" and info.value.status_code == 404


def test_openai_client_raises_bad_request(client):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], top_p=1.5)
    assert "top_p" in info.value.body["message"]


def test_server_still_serves_after_bad_requests(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=2, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 2
