"""The server under abuse: bounds at the door, OpenAI-shaped errors for every failure, keep-alive after a 4xx.

Every test talks to a real `nanoserve serve` on 127.0.0.1 and is bounded in time (httpx timeouts)."""
import json
import socket
import time

import httpx
import pytest

from conftest import MODEL_NAME, metrics

COMPLETION = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 2, "temperature": 0, "ignore_eos": True}
CHAT = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}
SMALL_LIMITS = ("--num-kv-blocks", "32", "--max-n", "4", "--max-request-body-bytes", "200000",
                "--max-prompt-chars", "5000")


def post(url: str, route: str, body=None, timeout: float = 30, **kwargs) -> httpx.Response:
    if body is not None:
        kwargs["json"] = body
    return httpx.post(url + route, timeout=timeout, trust_env=False, **kwargs)


def assert_error(r: httpx.Response, status: int, param=None) -> dict:
    """An OpenAI-shaped JSON error with this status (and field, when given)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == status and error["message"]
    if param is not None:
        assert error["param"] == param, error
    return error


@pytest.fixture(scope="module")
def small(start_server):
    """A server with tight bounds: 32 KV blocks, n <= 4, 200 kB bodies, 5,000-character prompts."""
    return start_server(*SMALL_LIMITS)


# ---- bounds at the door -------------------------------------------------------------------------------------------
def test_huge_n_is_refused_at_once_naming_n(server):
    start = time.monotonic()
    assert_error(post(server, "/v1/completions", {**COMPLETION, "n": 10**9}, timeout=10), 400, "n")
    assert_error(post(server, "/v1/chat/completions", {**CHAT, "n": 129}, timeout=10), 400, "n")  # over --max-n
    assert time.monotonic() - start < 5
    assert httpx.get(server + "/health", timeout=5, trust_env=False).status_code == 200


def test_n_beyond_max_num_seqs_runs_in_waves(server):
    """n=40 on a server with 16 seats: every choice comes back, and a seeded request repeats itself."""
    body = {"model": MODEL_NAME, "prompt": "Count", "max_tokens": 4, "n": 40, "temperature": 1.0, "seed": 9,
            "ignore_eos": True}
    first = post(server, "/v1/completions", body)
    assert first.status_code == 200, first.text
    choices = first.json()["choices"]
    assert sorted(c["index"] for c in choices) == list(range(40))
    assert first.json()["usage"]["completion_tokens"] == 160
    again = post(server, "/v1/completions", body).json()["choices"]
    assert {c["index"]: c["text"] for c in again} == {c["index"]: c["text"] for c in choices}


def test_n_and_max_tokens_are_bounded_by_the_configured_limits(small):
    assert_error(post(small.url, "/v1/completions", {**COMPLETION, "n": 5}), 400, "n")
    sampled = {**COMPLETION, "temperature": 1.0}  # greedy n > 1 is its own 400, as in vLLM
    error = assert_error(post(small.url, "/v1/completions", {**sampled, "n": 4, "max_tokens": 300}), 400, "n")
    assert "KV" in error["message"]
    assert post(small.url, "/v1/completions", {**sampled, "n": 4}).status_code == 200


def test_every_prompt_of_a_request_counts_towards_max_n(small):
    """--max-n bounds the choices of a request, not of each prompt: 3 prompts x n=2 are 6 choices."""
    sampled = {**COMPLETION, "temperature": 1.0}
    error = assert_error(post(small.url, "/v1/completions", {**sampled, "prompt": ["a", "b", "c"], "n": 2}), 400, "n")
    assert "3 prompts x n=2" in error["message"]
    assert post(small.url, "/v1/completions", {**sampled, "prompt": ["a", "b"], "n": 2}).status_code == 200


@pytest.mark.parametrize("defs", [[1], "x", None])
def test_a_tool_whose_defs_are_not_an_object_is_a_400(server, defs):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "$defs": defs}}}
    for stream in (False, True):
        body = {**CHAT, "tools": [tool], "tool_choice": "required", "stream": stream}
        error = assert_error(post(server, "/v1/chat/completions", body), 400)
        assert "$defs" in error["message"]
    assert post(server, "/v1/chat/completions", CHAT).status_code == 200


def test_a_body_over_the_limit_is_a_413(small):
    r = post(small.url, "/v1/completions", {**COMPLETION, "prompt": "x" * 300_000})
    assert_error(r, 413)
    assert r.headers.get("connection") == "close"
    # without a Content-Length (chunked upload) the limit still holds: the stream is cut when it passes it
    chunks = (b'{"prompt": "' + b"x" * 50_000 for _ in range(6))
    r = httpx.post(small.url + "/v1/completions", content=chunks, timeout=30, trust_env=False,
                   headers={"content-type": "application/json"})
    assert_error(r, 413)


def test_a_prompt_too_long_to_fit_is_refused_before_tokenizing(small):
    error = assert_error(post(small.url, "/v1/completions", {**COMPLETION, "prompt": "ab " * 2000}), 400, "prompt")
    assert "characters" in error["message"]
    chat = {**CHAT, "messages": [{"role": "user", "content": "ab " * 2000}]}
    assert "characters" in assert_error(post(small.url, "/v1/chat/completions", chat), 400, "messages")["message"]


# ---- JSON only, and only sound JSON ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["text/plain", "form", "multipart", "none"])
def test_bodies_that_are_not_declared_json_get_a_415(server, kind):
    raw = json.dumps(COMPLETION).encode()
    if kind == "form":
        r = httpx.post(server + "/v1/completions", data={"prompt": "Hello"}, timeout=30, trust_env=False)
    elif kind == "multipart":
        r = httpx.post(server + "/v1/completions", files={"f": ("a.json", raw)}, timeout=30, trust_env=False)
    else:
        headers = {"content-type": "text/plain"} if kind == "text/plain" else {}
        r = httpx.post(server + "/v1/completions", content=raw, headers=headers, timeout=30, trust_env=False)
    assert_error(r, 415)


def test_json_content_type_with_a_charset_is_json(server):
    r = httpx.post(server + "/v1/completions", content=json.dumps(COMPLETION).encode(), timeout=30, trust_env=False,
                   headers={"content-type": "application/json; charset=utf-8"})
    assert r.status_code == 200


BAD_BODIES = [
    ("/v1/completions", b"[" * 100_000 + b"]" * 100_000, None),
    ("/v1/completions", ('{"prompt": "hi", "x": ' + "[" * 70 + "]" * 70 + "}").encode(), "x"),
    ("/v1/completions", b'{"model": "\\ud800", "prompt": "hi"}', "model"),
    ("/v1/completions", b'{"prompt": ["ok", "\\udfff"]}', "prompt"),
    ("/v1/chat/completions", json.dumps({**CHAT, "tools": "get_weather"}).encode(), "tools"),
    ("/v1/chat/completions", json.dumps({**CHAT, "tools": {"type": "function"}}).encode(), "tools"),
    ("/v1/chat/completions", json.dumps({**CHAT, "logprobs": True, "top_logprobs": -1}).encode(), "top_logprobs"),
    ("/v1/chat/completions", json.dumps({**CHAT, "logprobs": True, "top_logprobs": 2.5}).encode(), "top_logprobs"),
    ("/v1/chat/completions", json.dumps({**CHAT, "add_generation_prompt": "yes"}).encode(), "add_generation_prompt"),
] + [("/v1/chat/completions", json.dumps({**CHAT, "chat_template_kwargs": {key: value}}).encode(), "chat_template_kwargs")
     for key, value in (("tokenize", True), ("add_generation_prompt", False), ("conversation", []),
                        ("messages", []), ("return_dict", True))]


@pytest.mark.parametrize("route,raw,param", BAD_BODIES, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD_BODIES)])
def test_malformed_bodies_are_400s_naming_the_field(server, route, raw, param):
    r = httpx.post(server + route, content=raw, headers={"content-type": "application/json"}, timeout=30,
                   trust_env=False)
    assert_error(r, 400, param)


def test_unknown_routes_and_methods_are_openai_shaped(server):
    assert_error(httpx.get(server + "/v1/nothing-here", timeout=10, trust_env=False), 404)
    assert_error(httpx.get(server + "/v1/completions", timeout=10, trust_env=False), 405)


# ---- request templates only behind the flag -------------------------------------------------------------------------
TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<|im_start|>assistant\n"
RUNAWAY = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


@pytest.mark.parametrize("where", ["chat_template", "chat_template_kwargs"])
def test_request_templates_are_refused_by_default(server, where):
    body = {**CHAT, "chat_template": TEMPLATE} if where == "chat_template" else \
        {**CHAT, "chat_template_kwargs": {"chat_template": TEMPLATE}}
    error = assert_error(post(server, "/v1/chat/completions", body), 400, where)
    assert "--trust-request-chat-template" in error["message"]


def test_a_trusted_request_template_renders_and_a_runaway_one_is_killed(start_server):
    srv = start_server("--trust-request-chat-template", "--chat-template-timeout", "1.5")
    plain = post(srv.url, "/v1/chat/completions", CHAT).json()["usage"]["prompt_tokens"]
    own = post(srv.url, "/v1/chat/completions", {**CHAT, "chat_template": TEMPLATE})
    assert own.status_code == 200 and own.json()["usage"]["prompt_tokens"] != plain
    with httpx.Client(trust_env=False, timeout=30) as http:
        start = time.monotonic()
        pending = http.build_request("POST", srv.url + "/v1/chat/completions",
                                     json={**CHAT, "chat_template_kwargs": {"chat_template": RUNAWAY}})
        import threading

        result = {}
        t = threading.Thread(target=lambda: result.update(r=http.send(pending)))
        t.start()
        time.sleep(0.3)
        health_start = time.monotonic()
        assert httpx.get(srv.url + "/health", timeout=5, trust_env=False).status_code == 200
        assert time.monotonic() - health_start < 0.5  # the event loop is not rendering it
        t.join(timeout=30)
    error = assert_error(result["r"], 400, "chat_template")
    assert "did not finish within 1.5 s" in error["message"] and time.monotonic() - start < 10
    # the killed renderer was replaced: chat still works
    assert post(srv.url, "/v1/chat/completions", CHAT).json()["usage"]["prompt_tokens"] == plain


def test_a_failing_request_template_is_a_400(start_server):
    srv = start_server("--trust-request-chat-template")
    body = {**CHAT, "chat_template": "{{ raise_exception('no thanks') }}"}
    assert "no thanks" in assert_error(post(srv.url, "/v1/chat/completions", body), 400, "chat_template")["message"]
    body = {**CHAT, "chat_template": "{% for %}"}
    assert_error(post(srv.url, "/v1/chat/completions", body), 400, "chat_template")


# ---- keep-alive survives every 4xx ----------------------------------------------------------------------------------
def _exchange(sock, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> tuple:
    """One HTTP/1.1 request on an open socket; (status, headers, body) of the response."""
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    head += f"Content-Type: {content_type}\r\n\r\n" if content_type else "\r\n"
    sock.sendall(head.encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    header, rest = data.split(b"\r\n\r\n", 1)
    lines = header.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers = {k.lower(): v for k, v in headers.items()}
    length = int(headers.get("content-length", 0))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest


def test_keep_alive_survives_each_kind_of_4xx(server):
    host, port = server.removeprefix("http://").split(":")
    good = json.dumps(COMPLETION).encode()
    bad = [(b, "application/json") for _, b, _ in BAD_BODIES] + [(good, "text/plain"),
                                                                  (json.dumps({**COMPLETION, "n": 10**9}).encode(),
                                                                   "application/json")]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        for body, ctype in bad:
            status, headers, _ = _exchange(sock, "POST", "/v1/completions", body, ctype)
            assert 400 <= status < 500 and headers.get("connection") != "close"
            status, _, answer = _exchange(sock, "POST", "/v1/completions", good)
            assert status == 200 and json.loads(answer)["usage"]["completion_tokens"] == 2
        status, _, _ = _exchange(sock, "GET", "/v1/missing", b"", None)
        assert status == 404
        assert _exchange(sock, "POST", "/v1/completions", good)[0] == 200


# ---- every request aborted when its client goes away --------------------------------------------------------------
def test_a_plain_request_whose_client_hangs_up_is_aborted(server):
    before = metrics(server)
    aborts = 'nanoserve:request_success_total{finished_reason="abort"}'
    body = {**COMPLETION, "max_tokens": 900, "temperature": 1.0, "top_p": 0.9, "seed": 0}
    with pytest.raises(httpx.ReadTimeout):
        post(server, "/v1/completions", body, timeout=1.5)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = metrics(server)
        if m["nanoserve:num_requests_running"] == 0 and m["nanoserve:kv_blocks_used"] == 0:
            break
        time.sleep(0.1)
    assert m["nanoserve:num_requests_running"] == 0 and m["nanoserve:kv_blocks_used"] == 0
    assert m[aborts] - before.get(aborts, 0) == 1
    assert m["nanoserve:generation_tokens_total"] == before["nanoserve:generation_tokens_total"]  # not run to the end


def test_min_tokens_with_only_banned_allowed_tokens_is_refused(server):
    body = {**COMPLETION, "ignore_eos": False, "min_tokens": 2, "allowed_token_ids": [151645]}  # <|im_end|>: EOS
    assert_error(post(server, "/v1/completions", body), 400, "allowed_token_ids")
    assert post(server, "/v1/completions", {**body, "ignore_eos": True}).status_code == 200
    stops = {**COMPLETION, "min_tokens": 2, "allowed_token_ids": [5, 9], "stop_token_ids": [5, 9]}
    error = assert_error(post(server, "/v1/completions", stops), 400, "allowed_token_ids")
    assert "min_tokens" in error["message"]
