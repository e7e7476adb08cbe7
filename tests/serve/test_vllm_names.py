"""vLLM's and OpenAI's names on an in-process app: each one served with its meaning, or refused by name."""
import json
import logging

import pytest
from serve_marks import needs_structured

NAME = "tiny-qwen3"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "Rome"]}}, "required": ["city"]}}}
CHAT = {"model": NAME, "messages": ASK, "max_tokens": 2}
COMPLETION = {"model": NAME, "prompt": "Hello", "max_tokens": 2}
VERDICT = {"type": "string", "enum": ["yes", "no"]}  # a random model pads an object with whitespace to max_tokens




@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from nanoserve.entrypoints.async_engine import AsyncEngine

    engine = AsyncEngine.from_args(str(tiny_model_dir), device="cpu", max_model_len=512, num_kv_blocks=128)
    yield engine
    engine.shutdown()


def app_client(engine, **settings):
    """A TestClient over build_app(engine, FrontendArgs(**settings)): the whole app, no server process."""
    from fastapi.testclient import TestClient

    from nanoserve.entrypoints.openai_server import build_app
    from nanoserve.serve import FrontendArgs

    return TestClient(build_app(engine, FrontendArgs(**{"served_model_name": NAME, **settings}), NAME))


@pytest.fixture(scope="module")
def http(engine):
    with app_client(engine) as client:
        yield client


def error_of(r, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


# 1. /v1/responses: text.format, background, reasoning, unknown fields

@needs_structured
def test_responses_text_format_json_schema_constrains_the_answer(http):
    body = {"model": NAME, "input": "Is Paris in France?", "temperature": 0, "max_output_tokens": 64,
            "text": {"format": {"type": "json_schema", "name": "verdict", "schema": VERDICT, "strict": True}}}
    r = http.post("/v1/responses", json=body).json()
    assert r["status"] == "completed" and r["text"]["format"]["schema"] == VERDICT
    assert json.loads(r["output"][0]["content"][0]["text"]) in ("yes", "no")


@needs_structured
def test_responses_text_format_json_object_is_chats_json_object(http):
    from nanoserve.entrypoints.protocol import chat_request
    from nanoserve.entrypoints.responses import ResponsesRequest, chat_body_of

    body = ResponsesRequest.model_validate({"input": "Hi", "text": {"format": {"type": "json_object"}}})
    req = chat_request(chat_body_of(body), http.app.state.engine.tokenizer, 512)
    assert req.params.structured_outputs.json_object  # the same constraint chat's response_format builds
    plain = ResponsesRequest.model_validate({"input": "Hi", "text": {"format": {"type": "text"}}})
    assert chat_request(chat_body_of(plain), http.app.state.engine.tokenizer, 512).params.structured_outputs is None
    r = http.post("/v1/responses", json={"model": NAME, "input": "Hi", "max_output_tokens": 2,
                                         "text": {"format": {"type": "json_object"}}})
    assert r.status_code == 200 and r.json()["text"] == {"format": {"type": "json_object"}}


@pytest.mark.parametrize("extra,param", [
    ({"text": 5}, "text"), ({"text": {"format": {"type": "bogus"}}}, "text"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text"),  # no schema
    ({"text": {"format": {"type": "json_schema", "schema": VERDICT}}}, "text"),  # no name
    ({"text": {"format": {"type": "json_object", "schema": VERDICT}}}, "text"),
    ({"text": {"verbosity": "low"}}, "text"),
    ({"background": True}, "background"), ({"reasoning": {"effort": "low"}}, "reasoning")])
def test_responses_refusals_name_the_field(http, extra, param):
    err = error_of(http.post("/v1/responses", json={"model": NAME, "input": "Hi", "max_output_tokens": 2, **extra}))
    assert err["param"] == param, err


@needs_structured
def test_responses_text_format_with_a_forced_tool_names_text(http):
    fmt = {"format": {"type": "json_object"}}
    tool = {"type": "function", **WEATHER["function"]}
    err = error_of(http.post("/v1/responses", json={"model": NAME, "input": "Hi", "text": fmt, "tools": [tool],
                                                    "tool_choice": "required"}))
    assert err["param"] == "text", err


@needs_structured
def test_responses_text_format_schema_the_grammar_compiler_refuses_names_text(http):
    fmt = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "not-a-type"}}}
    err = error_of(http.post("/v1/responses", json={"model": NAME, "input": "Hi", "text": fmt}))
    assert err["param"] == "text", err


def test_responses_log_unknown_fields_once(http, caplog):
    with caplog.at_level(logging.WARNING, logger="nanoserve.server"):
        for _ in range(2):
            r = http.post("/v1/responses", json={"model": NAME, "input": "Hi", "max_output_tokens": 1,
                                                 "frobnicate_responses": 1})
            assert r.status_code == 200, r.text
    assert caplog.text.count("ignoring unknown request field 'frobnicate_responses'") == 1


# 2. vLLM fields this server cannot honour: refused by name, their defaults accepted

@pytest.mark.parametrize("field,value", [("reasoning_effort", "low"), ("vllm_xargs", {"k": 1}),
                                         ("kv_transfer_params", {"do_remote_prefill": True}),
                                         ("mm_processor_kwargs", {"num_crops": 4})])
def test_unhonoured_vllm_fields_are_refused_by_name(http, field, value):
    for route, body in (("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)):
        err = error_of(http.post(route, json={**body, field: value}))
        assert err["param"] == field and field in err["message"], (route, err)
        assert http.post(route, json={**body, field: None}).status_code == 200  # the default asks nothing


# 3. /tokenize and /detokenize

def test_tokenize_and_detokenize_check_the_model(http):
    for route, body in (("/tokenize", {"prompt": "hi"}), ("/tokenize", {"messages": ASK}),
                        ("/detokenize", {"tokens": [9707]})):
        err = error_of(http.post(route, json={**body, "model": "nope"}), 404)
        assert err["param"] == "model" and err["message"] == "The model `nope` does not exist."
        assert http.post(route, json={**body, "model": NAME}).status_code == 200


def test_tokenize_returns_token_strs_when_asked(http):
    r = http.post("/tokenize", json={"prompt": "Hello, world!", "return_token_strs": True}).json()
    assert r["tokens"] == [9707, 11, 1879, 0] and r["token_strs"] == ["Hello", ",", "Ġworld", "!"]
    assert http.post("/tokenize", json={"prompt": "Hello, world!"}).json()["token_strs"] is None
    chat = http.post("/tokenize", json={"messages": ASK, "return_token_strs": True}).json()
    assert len(chat["token_strs"]) == chat["count"] and chat["token_strs"][0] == "<|im_start|>"


def test_tokenize_add_special_tokens_reaches_the_tokenizer(http):
    """With a tokenizer that adds a BOS: on by default for a prompt, off for messages, as the body says otherwise."""
    from tokenizers.processors import TemplateProcessing

    tokenizer = http.app.state.engine.tokenizer
    bos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    before = tokenizer.backend_tokenizer.post_processor
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single="<|endoftext|> $A",
                                                                    special_tokens=[("<|endoftext|>", bos)])
    try:
        def first(body):
            return http.post("/tokenize", json=body).json()["tokens"][0]

        assert first({"prompt": "Hi"}) == bos and first({"prompt": "Hi", "add_special_tokens": False}) != bos
        assert first({"messages": ASK}) != bos and first({"messages": ASK, "add_special_tokens": True}) == bos
    finally:
        tokenizer.backend_tokenizer.post_processor = before


# 7. the server's words: --max-logprobs, logit_bias, an empty body, --api-key's reach

def test_too_many_logprobs_name_the_server_flag(http):
    err = error_of(http.post("/v1/chat/completions", json={**CHAT, "logprobs": True, "top_logprobs": 30}))
    assert err["param"] == "top_logprobs" and "--max-logprobs" in err["message"] and "LLM(" not in err["message"]
    err = error_of(http.post("/v1/completions", json={**COMPLETION, "logprobs": 30}))
    assert err["param"] == "logprobs" and "--max-logprobs" in err["message"]
    err = error_of(http.post("/v1/completions", json={**COMPLETION, "prompt_logprobs": 30}))
    assert err["param"] == "prompt_logprobs" and "--max-logprobs" in err["message"]


def test_a_nan_logit_bias_names_logit_bias(http):
    body = json.dumps(COMPLETION)[:-1] + ', "logit_bias": {"5": NaN}}'
    err = error_of(http.post("/v1/completions", content=body, headers={"content-type": "application/json"}))
    assert err["param"] == "logit_bias", err


@pytest.mark.parametrize("route,param", [("/v1/completions", "prompt"), ("/v1/chat/completions", "messages"),
                                         ("/v1/responses", "input"), ("/detokenize", "tokens")])
def test_an_empty_body_names_the_missing_field(http, route, param):
    err = error_of(http.post(route, content=b"", headers={"content-type": "application/json"}))
    assert err["param"] == param and param in err["message"], err


def test_api_key_help_says_what_it_guards_and_ping_is_open(engine):
    from nanoserve.serve import serve_parser

    help_text = " ".join(serve_parser().format_help().split())
    assert "/v1 route, /tokenize and /detokenize" in help_text
    with app_client(engine, api_key="sesame") as client:
        assert client.post("/tokenize", json={"prompt": "hi"}).status_code == 401
        assert client.post("/detokenize", json={"tokens": [1]}).status_code == 401
        assert client.get("/ping").status_code == 200 and client.post("/ping").status_code == 200


# 8. /ping

def test_ping_answers_as_health(http):
    health = http.get("/health")
    for method in ("GET", "POST"):
        r = http.request(method, "/ping")
        assert (r.status_code, r.text) == (health.status_code, health.text) == (200, "")


# 9. a streamed tool call: no chunk at all while the call is held back

@needs_structured
def test_streamed_required_tool_call_sends_no_empty_content(http):
    body = {**CHAT, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 200,
            "temperature": 0, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}  # vLLM's first chunk
    assert not any("content" in d for d in deltas[1:]), deltas
    held = [c for c in chunks[1:] if c["choices"] and not c["choices"][0]["delta"]
            and c["choices"][0]["finish_reason"] is None]
    assert not held, f"{len(held)} chunks carried nothing while the call was held back (vLLM sends none)"
    calls = [call for d in deltas for call in d.get("tool_calls", [])]
    assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
