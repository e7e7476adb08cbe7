"""SIGTERM and SIGINT: open streams end with an error event and [DONE], plain requests get a 503, exit code 0."""
import json
import signal
import threading
import time

import httpx
import pytest

from conftest import MODEL_NAME, metrics

SLOW = {"model": MODEL_NAME, "prompt": "Hello " * 20, "max_tokens": 900, "temperature": 1.0, "top_p": 0.9,
        "seed": 0, "ignore_eos": True}


@pytest.mark.parametrize("sig,flags", [(signal.SIGTERM, ()), (signal.SIGINT, ()), (signal.SIGINT, ("--engine-process",))],
                         ids=["SIGTERM", "SIGINT", "SIGINT-engine-process"])
def test_signal_ends_open_requests_cleanly_and_exits_0(start_server, sig, flags):
    srv = start_server(*flags)
    plain, events = {}, []

    def plain_request():
        plain["r"] = httpx.post(srv.url + "/v1/completions", json=SLOW, timeout=60, trust_env=False)

    def stream_request():
        with httpx.stream("POST", srv.url + "/v1/completions", json={**SLOW, "stream": True}, timeout=60,
                          trust_env=False) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:"):
                    events.append(line[5:].strip())

    threads = [threading.Thread(target=plain_request), threading.Thread(target=stream_request)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while metrics(srv.url)["nanoserve:num_requests_running"] < 2 or len(events) < 3:
        assert time.monotonic() < deadline, "the two requests did not start"
        time.sleep(0.05)
    srv.proc.send_signal(sig)
    for t in threads:
        t.join(timeout=30)
    assert srv.proc.wait(timeout=30) == 0
    r = plain["r"]
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == 503  # the last event says why the stream ended
    log = srv.log()
    worker = "in a process of its own" if flags else "on a thread of this process"  # unasked on a CPU: the thread
    assert f"(the engine {worker})" in log, log[-3000:]
    assert "Traceback" not in log and "Event loop is closed" not in log, log[-3000:]
    assert "nanoserve: stopped" in log  # main's finally ran: engine.shutdown() and the template processes
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.url + "/health", timeout=2, trust_env=False)


@pytest.mark.parametrize("flags", [(), ("--engine-process",)], ids=["engine-thread", "engine-process"])
def test_tensor_parallel_server_leaves_nothing_behind(start_server, flags):
    """TP=2 on CPU (gloo), the engine on a thread or in its own process (a GPU's default): SIGTERM stops every worker;
    no leaked semaphore or shared-memory segment is reported."""
    psutil = pytest.importorskip("psutil")
    srv = start_server("--tensor-parallel-size", "2", *flags)
    r = httpx.post(srv.url + "/v1/completions", json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 3,
                                                      "ignore_eos": True}, timeout=120, trust_env=False)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    children = psutil.Process(srv.proc.pid).children(recursive=True)
    assert len(children) >= 2  # the TP worker(s), the template renderer, the resource tracker
    assert srv.stop() == 0
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, [p.cmdline() for p in alive]
    log = srv.log()
    assert "leaked" not in log and "Traceback" not in log, log[-3000:]


def test_template_renderer_ignores_sigint(tiny_model_dir):
    """Ctrl-C signals the whole process group: the renderer child ignores SIGINT (no traceback, still renders)."""
    import asyncio
    import os

    from transformers import AutoTokenizer

    from nanoserve.entrypoints.render import TemplateRenderer

    renderer = TemplateRenderer(AutoTokenizer.from_pretrained(tiny_model_dir), timeout=60)
    chat = {"conversation": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": True}
    try:
        before = asyncio.run(renderer.render(chat))  # the child has started and set up its signals
        child = renderer._child.proc
        os.kill(child.pid, signal.SIGINT)
        time.sleep(0.5)
        assert child.is_alive() and child.exitcode is None
        assert asyncio.run(renderer.render(chat)) == before
    finally:
        renderer.close()
    assert not child.is_alive()  # the parent stops it
