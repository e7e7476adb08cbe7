"""A client that goes away mid-stream aborts its request: no running request and no KV block is left."""
import time

import httpx

from conftest import MAX_MODEL_LEN, MODEL_NAME, metrics


# nucleus sampling over Qwen3's vocabulary takes the sampler's slow path: the request would run for many seconds
SLOW_STREAM = {"model": MODEL_NAME, "prompt": "Hello " * 40, "max_tokens": MAX_MODEL_LEN - 100, "stream": True,
               "temperature": 1.0, "top_p": 0.9, "seed": 0, "ignore_eos": True}


def wait_for(url: str, condition, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(url)
        if condition(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def test_disconnect_mid_stream_frees_every_block(server):
    before = metrics(server)
    with httpx.Client(trust_env=False, timeout=60) as http:
        with http.stream("POST", server + "/v1/completions", json=SLOW_STREAM) as resp:
            assert resp.status_code == 200
            events = 0
            for line in resp.iter_lines():
                events += line.startswith("data:")
                if events == 3:
                    break
    after = wait_for(server, lambda m: m["nanoserve:num_requests_running"] == 0 and m["nanoserve:kv_blocks_used"] == 0)
    assert after["nanoserve:num_requests_running"] == 0
    assert after["nanoserve:num_requests_waiting"] == 0
    assert after["nanoserve:kv_blocks_used"] == 0
    aborts = 'nanoserve:request_success_total{finished_reason="abort"}'
    assert after[aborts] - before.get(aborts, 0) == 1  # ended by the abort, not by running to max_tokens
    assert after["nanoserve:generation_tokens_total"] == before["nanoserve:generation_tokens_total"]


def test_blocks_are_held_while_a_stream_runs(server):
    """The check above can fail: while a long stream is open its blocks show in /metrics."""
    with httpx.Client(trust_env=False, timeout=60) as http:
        with http.stream("POST", server + "/v1/completions", json=SLOW_STREAM) as resp:
            for i, _ in enumerate(resp.iter_lines()):
                if i == 4:  # scrape while still reading: leaving the loop drops the connection
                    held = metrics(server)
                    break
    assert held["nanoserve:kv_blocks_used"] > 0 and held["nanoserve:num_requests_running"] == 1
    wait_for(server, lambda m: m["nanoserve:kv_blocks_used"] == 0)
