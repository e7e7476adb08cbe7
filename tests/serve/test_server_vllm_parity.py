"""vLLM's server behaviour: generation_config.json defaults, --api-key, /tokenize, /version, vllm: metrics."""
import json
import shutil

import httpx
import pytest

from conftest import MODEL_NAME, ServerProcess, metrics

CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}]}


def post(url, route, body, **kwargs):
    return httpx.post(url + route, json=body, timeout=60, trust_env=False, **kwargs)


@pytest.fixture(scope="module")
def greedy_checkpoint_server(tiny_model_dir, tmp_path_factory):
    """A copy of the tiny checkpoint whose generation_config.json says greedy, at most 3 new tokens."""
    model = tmp_path_factory.mktemp("gen_config") / "tiny"
    shutil.copytree(tiny_model_dir, model)
    (model / "generation_config.json").write_text(json.dumps({"temperature": 0, "max_new_tokens": 3}))
    srv = ServerProcess(model, model.parent / "server.log").start()
    yield srv
    srv.stop()


def test_generation_config_defaults_apply_to_each_request(greedy_checkpoint_server):
    url = greedy_checkpoint_server.url
    a, b = (post(url, "/v1/chat/completions", {**CHAT, "ignore_eos": True}).json() for _ in range(2))
    assert a["usage"]["completion_tokens"] == 3  # max_new_tokens, not the whole context
    assert a["choices"][0]["message"] == b["choices"][0]["message"]  # temperature 0: greedy, not sampled
    r = post(url, "/v1/chat/completions", {**CHAT, "ignore_eos": True, "max_tokens": 5}).json()
    assert r["usage"]["completion_tokens"] == 5  # the request's own value wins


def test_api_key_is_enforced_on_every_v1_route(start_server):
    srv = start_server("--api-key", "sesame")
    routes = [("GET", "/v1/models", None), ("GET", f"/v1/models/{MODEL_NAME}", None),
              ("POST", "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1}),
              ("POST", "/v1/chat/completions", {**CHAT, "max_tokens": 1}),
              ("POST", "/tokenize", {"prompt": "hi"}), ("POST", "/detokenize", {"tokens": [1]})]
    for method, route, body in routes:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            r = httpx.request(method, srv.url + route, json=body, headers=headers, timeout=30, trust_env=False)
            assert r.status_code == 401 and r.json()["error"]["type"] == "AuthenticationError", route
        r = httpx.request(method, srv.url + route, json=body, headers={"authorization": "Bearer sesame"},
                          timeout=30, trust_env=False)
        assert r.status_code == 200, (route, r.text)
    assert httpx.get(srv.url + "/health", timeout=10, trust_env=False).status_code == 200


def test_tokenize_detokenize_version_and_model_card(server):
    r = post(server, "/tokenize", {"model": MODEL_NAME, "prompt": "Hello, world!"}).json()
    assert r["tokens"] == [9707, 11, 1879, 0] and r["count"] == 4 and r["max_model_len"] > 0
    chat = post(server, "/tokenize", CHAT).json()
    assert chat["count"] == post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 1}).json()["usage"][
        "prompt_tokens"]
    assert post(server, "/detokenize", {"tokens": r["tokens"]}).json() == {"prompt": "Hello, world!"}
    assert post(server, "/detokenize", {"tokens": [-1]}).json()["error"]["param"] == "tokens"
    assert httpx.get(server + "/version", timeout=10, trust_env=False).json()["version"]
    card = httpx.get(server + f"/v1/models/{MODEL_NAME}", timeout=10, trust_env=False).json()
    assert card["id"] == MODEL_NAME and card["object"] == "model"
    assert httpx.get(server + "/v1/models/other", timeout=10, trust_env=False).status_code == 404


@pytest.mark.parametrize("field,value", [("continue_final_message", True), ("truncate_prompt_tokens", 5),
                                         ("priority", 3), ("return_tokens_as_token_ids", True),
                                         ("spaces_between_special_tokens", False), ("documents", [{"text": "x"}]),
                                         ("structured_outputs", {"whitespace_pattern": " "})])  # choice etc. honoured
def test_fields_this_server_cannot_honour_are_refused_by_name(server, field, value):
    r = post(server, "/v1/chat/completions", {**CHAT, "max_tokens": 1, field: value})
    assert r.status_code == 400 and r.json()["error"]["param"] == field


def test_request_id_names_the_response(server):
    r = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1, "request_id": "abc"})
    assert r.json()["id"] == "cmpl-abc"


def test_metrics_carry_vllm_names_with_the_model_label(server):
    post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 2})
    m = metrics(server)
    label = f'model_name="{MODEL_NAME}"'
    assert m[f"vllm:generation_tokens_total{{{label}}}"] == m["nanoserve:generation_tokens_total"] > 0
    assert f'vllm:request_success_total{{finished_reason="length",{label}}}' in m
    assert m[f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",{label}}}'] > 0


def test_unknown_fields_are_logged_once(start_server):
    srv = start_server()
    for _ in range(2):
        r = post(srv.url, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1, "frobnicate": 1})
        assert r.status_code == 200
    assert srv.log().count("ignoring unknown request field 'frobnicate'") == 1


@pytest.fixture(scope="module")
def reasoning_server(start_server):
    return start_server("--reasoning-parser", "qwen3")


def test_reasoning_splitter_holds_back_only_partial_tags():
    from nanoserve.entrypoints.protocol import ReasoningSplitter, split_reasoning

    assert split_reasoning("<think>\nIt is 4.\n</think>\n\n4.") == ("\nIt is 4.\n", "\n\n4.")
    assert split_reasoning("no thinking") == (None, "no thinking")
    assert split_reasoning("<think>cut short") == ("cut short", "")
    s = ReasoningSplitter()
    assert [s.feed(p) for p in ("<thi", "nk>Hmm", ", 4.</th", "ink>", "Four.")] == \
        [("", ""), ("Hmm", ""), (", 4.", ""), ("", ""), ("", "Four.")]


def test_reasoning_content_is_split_streamed_or_not(reasoning_server):
    think, end_think, a = 151667, 151668, 64  # <think>, </think>, "a"
    body = {**CHAT, "max_tokens": 12, "temperature": 1.0, "seed": 4, "ignore_eos": True,
            "allowed_token_ids": [think, end_think, a]}
    url = reasoning_server.url
    for seed in range(20):  # find a seed whose output thinks first and then answers
        msg = post(url, "/v1/chat/completions", {**body, "seed": seed}).json()["choices"][0]["message"]
        if msg["reasoning_content"] and msg["content"]:
            break
    else:
        pytest.fail("no seed gave <think> ... </think> ...")
    body["seed"] = seed
    thought, said = "", ""
    with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60,
                      trust_env=False) as resp:
        for line in resp.iter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                for choice in json.loads(line[5:])["choices"]:
                    thought += choice["delta"].get("reasoning_content") or ""
                    said += choice["delta"].get("content") or ""
    assert (thought, said) == (msg["reasoning_content"], msg["content"])
    plain = post(url, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": 2}).json()
    assert "reasoning_content" not in plain["choices"][0]  # completions are left alone

    hidden = {**body, "include_reasoning": False}  # vLLM's field: the thinking is split off and not sent
    quiet = post(url, "/v1/chat/completions", hidden).json()["choices"][0]["message"]
    assert quiet["content"] == msg["content"] and "reasoning" not in quiet and "reasoning_content" not in quiet
    with httpx.stream("POST", url + "/v1/chat/completions", json={**hidden, "stream": True}, timeout=60,
                      trust_env=False) as resp:
        deltas = [c["delta"] for line in resp.iter_lines() if line.startswith("data:") and line != "data: [DONE]"
                  for c in json.loads(line[5:])["choices"]]
    assert not any("reasoning" in d or "reasoning_content" in d for d in deltas)
    assert "".join(d.get("content") or "" for d in deltas) == msg["content"]


def test_enable_thinking_false_puts_an_empty_think_block_in_the_prompt(server):
    on = post(server, "/tokenize", CHAT).json()["tokens"]
    off = post(server, "/tokenize", {**CHAT, "chat_template_kwargs": {"enable_thinking": False}}).json()["tokens"]
    assert 151667 not in on and off.count(151667) == 1 and off.count(151668) == 1


def test_vllm_server_flags(start_server, tmp_path):
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    srv = start_server("--chat-template", str(template), "--enable-log-requests", "--max-logprobs", "2",
                       "--allowed-origins", "http://localhost:3000", "--uvicorn-log-level", "warning")
    # the template renders "[hi]": 3 tokens or so, far fewer than Qwen3's own template
    tokens = post(srv.url, "/tokenize", CHAT).json()["tokens"]
    assert post(srv.url, "/detokenize", {"tokens": tokens}).json()["prompt"] == "[hi]"
    r = post(srv.url, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1, "logprobs": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = post(srv.url, "/v1/completions", {"model": MODEL_NAME, "prompt": "hi", "max_tokens": 1, "request_id": "q7"})
    assert r.status_code == 200 and "request cmpl-q7" in srv.log()
    preflight = httpx.options(srv.url + "/v1/completions", timeout=10, trust_env=False, headers={
        "origin": "http://localhost:3000", "access-control-request-method": "POST"})
    assert preflight.headers.get("access-control-allow-origin") == "http://localhost:3000"
    other = httpx.options(srv.url + "/v1/completions", timeout=10, trust_env=False, headers={
        "origin": "http://evil.example", "access-control-request-method": "POST"})
    assert other.headers.get("access-control-allow-origin") is None


def test_continuous_usage_stats_puts_the_counts_so_far_on_every_chunk(server):
    body = {**CHAT, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with httpx.stream("POST", server + "/v1/chat/completions", json=body, timeout=60, trust_env=False) as resp:
        chunks = [json.loads(line[5:]) for line in resp.iter_lines() if line.startswith("data:") and line != "data: [DONE]"]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[0] <= 1 and counts[-1] == 4
    assert all(c["usage"]["prompt_tokens"] == chunks[-1]["usage"]["prompt_tokens"] > 0 for c in chunks)
    assert chunks[-1]["choices"] == []  # include_usage's own last chunk is still there
