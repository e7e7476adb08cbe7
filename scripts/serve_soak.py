"""Soak the HTTP server: mixed valid, hostile and abandoned requests from many clients against `nanoserve serve`.

Valid requests (completions and chat, streamed or not, n up to 2) must succeed with their exact token counts;
bad ones must get a 4xx JSON error; clients that hang up must free their work. At the end no request may be
running, no KV block held, and the server must still answer. Usage:
    python scripts/serve_soak.py --seconds 120 [--clients 8] [--seed 0]
"""
import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "serve"))
from conftest import MODEL_NAME, ServerProcess  # noqa: E402  (the test suite's server launcher)

BAD = [({"prompt": "hi", "n": 10**9}, 400), ({"prompt": "hi", "temperature": -1}, 400),
       ({"prompt": "x" * 300_000}, 400), ({"messages": [{"role": "user", "content": "hi"}],
                                           "chat_template_kwargs": {"tokenize": True}}, 400),
       ({"messages": [{"role": "user", "content": "hi"}], "chat_template": "{{ 1 }}"}, 400)]


@dataclass
class SoakStats:
    """What a server soak saw."""

    ok: int = 0
    refused: int = 0
    hung_up: int = 0
    errors: list = field(default_factory=list)
    final_metrics: dict = field(default_factory=dict)
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def one_request(http, url: str, rng: random.Random, stats: SoakStats) -> None:
    """A random request: valid (checked), bad (must be refused) or abandoned (must be aborted)."""
    kind = rng.random()
    if kind < 0.15:
        body, status = rng.choice(BAD)
        route = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        r = await http.post(url + route, json={"model": MODEL_NAME, **body})
        if r.status_code != status or "error" not in r.json():
            stats.errors.append(f"bad request got {r.status_code}: {r.text[:200]}")
        stats.refused += 1
        return
    chat, stream, n = rng.random() < 0.5, rng.random() < 0.5, rng.choice([1, 1, 2])
    max_tokens = rng.randint(1, 12)
    body = {"model": MODEL_NAME, "max_tokens": max_tokens, "n": n, "ignore_eos": True,
            "temperature": 0.8 if n > 1 else rng.choice([0, 0.8]), "seed": rng.randint(0, 99)}  # greedy n>1: a 400
    if chat:
        route, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": f"q{rng.randint(0, 999)}"}]
    else:
        route, body["prompt"] = "/v1/completions", "Hello " * rng.randint(1, 30)
    if kind > 0.9:  # a client that goes away mid-request
        body.update(max_tokens=400, stream=stream)
        try:
            if stream:
                async with http.stream("POST", url + route, json=body) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data:"):
                            break
            else:
                await http.post(url + route, json=body, timeout=0.3)
        except httpx.TimeoutException:
            pass
        stats.hung_up += 1
        return
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        usage = None
        async with http.stream("POST", url + route, json=body) as resp:
            async for line in resp.aiter_lines():
                if line.startswith("data:") and line != "data: [DONE]":
                    chunk = json.loads(line[5:])
                    usage = chunk.get("usage") or usage
                    if "error" in chunk:
                        stats.errors.append(f"stream error: {chunk}")
    else:
        r = await http.post(url + route, json=body)
        usage = r.json().get("usage") if r.status_code == 200 else None
        if r.status_code != 200:
            stats.errors.append(f"valid request got {r.status_code}: {r.text[:200]}")
    if usage is None or usage["completion_tokens"] != n * max_tokens:
        stats.errors.append(f"wrong usage {usage} for n={n} max_tokens={max_tokens}")
    else:
        stats.ok += 1


async def run_clients(url: str, seconds: float, clients: int, seed: int, stats: SoakStats) -> None:
    deadline = time.monotonic() + seconds

    async def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            while time.monotonic() < deadline:
                try:
                    await one_request(http, url, rng, stats)
                except Exception as e:  # a dropped connection on a valid request is a failure
                    stats.errors.append(f"{type(e).__name__}: {e}"[:200])

    await asyncio.gather(*(client(i) for i in range(clients)))


def soak(seconds: float = 60, clients: int = 8, seed: int = 0, workdir=None) -> SoakStats:
    """Start a server on a tiny checkpoint, soak it, check it is idle and clean afterwards, stop it."""
    from nanoserve.entrypoints.metrics import parse_metrics
    from nanoserve.model.tiny import make_tiny_checkpoint

    workdir = Path(workdir or tempfile.mkdtemp(prefix="serve_soak_"))
    model = make_tiny_checkpoint(workdir / "tiny", with_tokenizer=True)
    srv = ServerProcess(model, workdir / "server.log", "--max-prompt-chars", "100000").start()
    stats = SoakStats(rss_start_mib=rss_mib(srv.proc.pid))
    try:
        asyncio.run(run_clients(srv.url, seconds, clients, seed, stats))
        for _ in range(100):  # aborts land between two steps
            m = parse_metrics(httpx.get(srv.url + "/metrics", timeout=10, trust_env=False).text)
            if m["nanoserve:num_requests_running"] == m["nanoserve:kv_blocks_used"] == 0:
                break
            time.sleep(0.1)
        stats.final_metrics = {k.split(":", 1)[1]: v for k, v in m.items()
                               if k.startswith(("nanoserve:num_requests", "nanoserve:kv_blocks_used"))}
        stats.rss_end_mib = rss_mib(srv.proc.pid)
    finally:
        code = srv.stop()
    if code != 0:
        stats.errors.append(f"the server exited with {code} on SIGTERM")
    if "Traceback" in srv.log():
        stats.errors.append("the server log holds a traceback")
    return stats


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    start = time.monotonic()
    s = soak(a.seconds, a.clients, a.seed)
    print(f"wall {time.monotonic() - start:.0f} s: {s.ok} ok, {s.refused} refused as expected, {s.hung_up} hung up, "
          f"{len(s.errors)} errors; final {s.final_metrics}; server RSS {s.rss_start_mib:.0f} -> "
          f"{s.rss_end_mib:.0f} MiB")
    for e in s.errors[:10]:
        print("  ", e)
    clean = not s.errors and not any(s.final_metrics.values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
