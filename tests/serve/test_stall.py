"""With stalling requests in flight, another client's stream keeps its inter-token latency within 2x of idle."""
import statistics
import threading
import time

import httpx

from conftest import MODEL_NAME

STREAM = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 150, "temperature": 0, "ignore_eos": True,
          "stream": True}
RUNAWAY = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


def stream_gaps(url: str) -> list:
    """Seconds between consecutive chunks of one greedy stream."""
    times = []
    with httpx.stream("POST", url + "/v1/completions", json=STREAM, timeout=120, trust_env=False) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                times.append(time.perf_counter())
    return [b - a for a, b in zip(times, times[1:])]


def stallers(url: str) -> list:
    """Threads sending the requests that used to freeze the engine or the event loop."""
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    bodies = [("/v1/chat/completions", {**chat, "chat_template_kwargs": {"chat_template": RUNAWAY}}),
              ("/v1/completions", {"model": MODEL_NAME, "prompt": "lorem ipsum dolor " * 100_000, "max_tokens": 2}),
              ("/v1/completions", {"model": MODEL_NAME, "prompt": "x", "n": 10**9})]
    codes = []

    def send(route, body):
        codes.append(httpx.post(url + route, json=body, timeout=120, trust_env=False).status_code)

    return [threading.Thread(target=send, args=rb) for rb in bodies], codes


def measure(url: str) -> tuple:
    """(idle p50 ITL: the mean of the medians before and after, p50 and max ITL with stallers, statuses)."""
    before = statistics.median(stream_gaps(url))
    threads, codes = stallers(url)
    for t in threads:
        t.start()
    time.sleep(0.2)  # the template renders and the long prompt tokenizes while the stream runs
    gaps = stream_gaps(url)
    for t in threads:
        t.join(timeout=120)
    after = statistics.median(stream_gaps(url))
    return (before + after) / 2, statistics.median(gaps), max(gaps), codes


def test_stalling_requests_do_not_stall_other_streams(start_server):
    srv = start_server("--trust-request-chat-template", "--chat-template-timeout", "3",
                       "--max-prompt-chars", "4000000", "--max-request-body-bytes", "8000000")
    stream_gaps(srv.url)  # warm up
    for attempt in range(3):  # the CPU is shared with whatever else runs: a noisy attempt may be repeated
        idle, busy, worst, codes = measure(srv.url)
        print(f"\ninter-token latency: idle p50 {1e3 * idle:.1f} ms; with stallers p50 {1e3 * busy:.1f} ms "
              f"({busy / idle:.2f}x), max {1e3 * worst:.1f} ms; staller statuses {codes}")
        assert codes == [400, 400, 400]  # each refused: too many tokens (after tokenizing), too slow, too many n
        assert worst < 1.0  # no freeze (the engine thread used to tokenize the long prompt: seconds)
        if busy <= 2 * idle:
            break
    assert busy <= 2 * idle
