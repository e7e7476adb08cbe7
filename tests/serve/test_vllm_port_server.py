"""vLLM 0.24's answers where a porting client depends on them (issue 38's first server gaps)."""
import json

import httpx
import pytest

from conftest import MAX_MODEL_LEN, MODEL_NAME

CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def post(url: str, route: str, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(url + route, json=body, timeout=60, trust_env=False, **kwargs)


def error_of(r: httpx.Response, param: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "BadRequestError", error
    return error["message"]


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_over_the_context_is_refused_in_vllms_words(server, field):
    body = {**CHAT, "max_tokens": None, field: 100_000}
    message = error_of(post(server, "/v1/chat/completions", body), field)
    assert message == (f"{field}=100000 cannot be greater than max_model_len=max_total_tokens={MAX_MODEL_LEN}. "
                       f"Please request fewer output tokens. (parameter={field}, value=100000)")
    completion = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 100_000}
    assert "cannot be greater than max_model_len" in error_of(post(server, "/v1/completions", completion), "max_tokens")


@pytest.mark.parametrize("value", [0, -1])
def test_max_completion_tokens_out_of_range_is_refused_by_its_own_name(server, value):
    message = error_of(post(server, "/v1/chat/completions", {**CHAT, "max_completion_tokens": value}),
                       "max_completion_tokens")
    assert message.startswith("max_completion_tokens must be") and "max_tokens" not in message, message
    beside = {**CHAT, "max_completion_tokens": 2, "min_tokens": 5}  # another field's error that names it
    message = error_of(post(server, "/v1/chat/completions", beside), "min_tokens")
    assert "max_completion_tokens (2)" in message and "max_tokens" not in message, message


def test_a_prompt_that_cannot_fit_gets_vllms_context_length_message(server):
    ids = [1] * (MAX_MODEL_LEN - 10)
    body = {"model": MODEL_NAME, "prompt": ids, "max_tokens": 20}
    message = error_of(post(server, "/v1/completions", body), "input_tokens")
    n = len(ids)
    assert message == (f"This model's maximum context length is {MAX_MODEL_LEN} tokens. However, you requested 20 "
                       f"output tokens and your prompt contains {n} input tokens, for a total of {n + 20} tokens. "
                       "Please reduce the length of the input prompt or the number of requested output tokens. "
                       f"(parameter=input_tokens, value={n})")
    # the same prompt with room for its answer runs; without max_tokens a chat answer takes the room that is left
    assert post(server, "/v1/completions", {**body, "max_tokens": 10}).status_code == 200
    full = {"model": MODEL_NAME, "prompt": [1] * MAX_MODEL_LEN, "max_tokens": 1}
    assert "maximum context length is" in error_of(post(server, "/v1/completions", full), "input_tokens")


def test_an_assistant_turn_with_no_content_is_empty_content(server):
    messages = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "tool_calls": []},
                {"role": "user", "content": "And now?"}, {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "content": "sunny", "tool_call_id": "c1"}]
    r = post(server, "/v1/chat/completions", {**CHAT, "messages": messages})
    assert r.status_code == 200, r.text


def test_the_request_id_header_comes_back(server):
    r = post(server, "/v1/chat/completions", CHAT, headers={"X-Request-Id": "trace-42"})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-42"
    refused = post(server, "/v1/chat/completions", {**CHAT, "n": 0}, headers={"X-Request-Id": "trace-43"})
    assert refused.status_code == 400 and refused.headers["x-request-id"] == "trace-43"
    assert "x-request-id" not in post(server, "/v1/chat/completions", CHAT).headers


def test_vllm_api_key_from_the_environment_works_like_the_flag(start_server, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "sesame")
    url = start_server().url
    assert post(url, "/v1/chat/completions", CHAT).status_code == 401
    assert post(url, "/v1/chat/completions", CHAT, headers={"Authorization": "Bearer sesame"}).status_code == 200


def test_reasoning_comes_back_as_reasoning_and_reasoning_content(start_server):
    url = start_server("--reasoning-parser", "qwen3").url
    think, end_think, a = 151667, 151668, 64  # <think>, </think>, "a"
    body = {**CHAT, "max_tokens": 12, "temperature": 1.0, "ignore_eos": True, "allowed_token_ids": [think, end_think, a]}
    for seed in range(20):  # a seed whose output thinks first and then answers
        msg = post(url, "/v1/chat/completions", {**body, "seed": seed}).json()["choices"][0]["message"]
        if msg.get("reasoning") and msg["content"]:
            break
    else:
        pytest.fail("no seed gave <think> ... </think> ...")
    assert msg["reasoning_content"] == msg["reasoning"]
    deltas = []
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "seed": seed, "stream": True},
                      timeout=60, trust_env=False) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                deltas += [c["delta"] for c in json.loads(line[5:])["choices"]]
    thinking = [d for d in deltas if "reasoning" in d or "reasoning_content" in d]
    assert thinking and all(d["reasoning"] == d["reasoning_content"] for d in thinking)
    assert "".join(d["reasoning"] for d in thinking) == msg["reasoning"]
