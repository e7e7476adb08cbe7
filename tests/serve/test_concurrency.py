"""Fifty clients stream at once from one engine loop; all complete with their exact token counts."""
import asyncio

import httpx
import pytest

from conftest import MAX_NUM_SEQS, MODEL_NAME, metrics

NUM_CLIENTS = 50
MAX_TOKENS = 4


async def one_client(http, url: str, i: int) -> tuple:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": f"Client {i} says hi."}],
            "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    chunks, usage, finish = 0, None, None
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            import json

            chunk = json.loads(line[5:])
            if chunk["choices"]:
                chunks += 1
                finish = chunk["choices"][0]["finish_reason"] or finish
            else:
                usage = chunk["usage"]
    return chunks, usage, finish


async def many_clients(url: str) -> list:
    limits = httpx.Limits(max_connections=NUM_CLIENTS)
    async with httpx.AsyncClient(trust_env=False, timeout=300, limits=limits) as http:
        return await asyncio.wait_for(asyncio.gather(*(one_client(http, url, i) for i in range(NUM_CLIENTS))), 300)


def test_fifty_concurrent_streams_all_complete(server):
    before = metrics(server)["nanoserve:generation_tokens_total"]
    results = asyncio.run(many_clients(server))
    assert len(results) == NUM_CLIENTS
    for chunks, usage, finish in results:
        assert finish == "length"
        assert usage["completion_tokens"] == MAX_TOKENS
        assert 2 <= chunks <= 1 + MAX_TOKENS  # the role chunk, then a chunk per step (steps that queued up merge)
    after = metrics(server)
    assert after["nanoserve:generation_tokens_total"] - before == NUM_CLIENTS * MAX_TOKENS
    assert after["nanoserve:num_requests_running"] == 0 and after["nanoserve:kv_blocks_used"] == 0
    assert NUM_CLIENTS > MAX_NUM_SEQS  # so some of them waited in the queue: backpressure, not failure


@pytest.mark.parametrize("n", [2])
def test_streamed_n_choices_are_interleaved_by_index(client, n):
    chunks = list(client.completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=3, n=n, temperature=1.0,
                                            stream=True, extra_body={"ignore_eos": True}))
    per_index = {}
    for c in chunks:
        for ch in c.choices:
            per_index.setdefault(ch.index, []).append(ch.finish_reason)
    assert sorted(per_index) == list(range(n))
    assert all(reasons[-1] == "length" and len(reasons) == 3 for reasons in per_index.values())
