"""A `nanoserve serve` process on a tiny model, shared by the serving tests (127.0.0.1, a free port)."""
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

MODEL_NAME = "tiny-qwen3"
MAX_MODEL_LEN = 1024
MAX_NUM_SEQS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from nanoserve.model.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny_serve"), with_tokenizer=True)


@pytest.fixture(scope="session")
def server(tiny_model_dir, tmp_path_factory):
    """The base URL of a running server; the process is stopped when the session ends."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve_log") / "server.log"
    cmd = [sys.executable, "-m", "nanoserve.serve", "serve", str(tiny_model_dir), "--host", "127.0.0.1",
           "--port", str(port), "--served-model-name", MODEL_NAME, "--device", "cpu",
           "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS), "--log-level", "warning"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not answer /health in time:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="session")
def client(server):
    openai = pytest.importorskip("openai")
    http = httpx.Client(trust_env=False, timeout=120)
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", http_client=http, max_retries=0)


def metrics(url: str) -> dict:
    """The server's /metrics as {name: value}."""
    from nanoserve.entrypoints.metrics import parse_metrics

    return parse_metrics(httpx.get(url + "/metrics", timeout=10, trust_env=False).text)
