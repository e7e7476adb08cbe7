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


class ServerProcess:
    """`python -m nanoserve.serve serve MODEL ...` on 127.0.0.1 and a free port; its log in a file."""

    def __init__(self, model_dir, log_path, *flags, max_num_seqs: int = MAX_NUM_SEQS):
        self.port, self.log_path = free_port(), log_path
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "nanoserve.serve", "serve", str(model_dir), "--host", "127.0.0.1",
                    "--port", str(self.port), "--served-model-name", MODEL_NAME, "--device", "cpu",
                    "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(max_num_seqs),
                    "--log-level", "warning", *flags]
        self.proc = None

    def start(self, timeout: float = 180) -> "ServerProcess":
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2, trust_env=False).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"the server did not answer /health in time:\n{self.log()[-3000:]}")
            time.sleep(0.3)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after 30 s; the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


@pytest.fixture(scope="session")
def start_server(tiny_model_dir, tmp_path_factory):
    """start_server(*flags) -> a started ServerProcess with extra flags; every one is stopped at the end."""
    started = []

    def start(*flags, **kwargs):
        log = tmp_path_factory.mktemp("serve_log") / "server.log"
        started.append(ServerProcess(tiny_model_dir, log, *flags, **kwargs).start())
        return started[-1]

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def server(start_server):
    """The base URL of a running server with the default flags; the process is stopped when the session ends."""
    return start_server().url


@pytest.fixture(scope="session")
def client(server):
    openai = pytest.importorskip("openai")
    http = httpx.Client(trust_env=False, timeout=120)
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", http_client=http, max_retries=0)


def metrics(url: str) -> dict:
    """The server's /metrics as {name: value}."""
    from nanoserve.entrypoints.metrics import parse_metrics

    return parse_metrics(httpx.get(url + "/metrics", timeout=10, trust_env=False).text)
