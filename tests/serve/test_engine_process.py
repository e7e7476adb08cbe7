"""The engine in a process of its own (chapter 16 section 6): the worker thread's tokens, door checks, aborts,
shutdown, and the HTTP server over it."""
import asyncio
import gc
import threading
import time

import httpx
import pytest

from nanoserve import SamplingParams
from nanoserve.engine.config import EngineConfig
from nanoserve.entrypoints.async_engine import AsyncEngine, RequestAborted
from nanoserve.entrypoints.engine_process import EngineProcess
from nanoserve.structured import StructuredOutputsParams

ARGS = dict(device="cpu", max_model_len=512, num_kv_blocks=128, max_num_seqs=4)
GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
PROMPTS = ["Hello", "Good morning", {"prompt_token_ids": [3, 14, 15, 92, 65]}, "a b c", "The capital of France"]


def in_process(model_dir) -> AsyncEngine:
    return AsyncEngine(EngineProcess(EngineConfig(model=str(model_dir), **ARGS)))


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    pair = in_process(tiny_model_dir), AsyncEngine.from_args(tiny_model_dir, **ARGS)
    yield pair
    for engine in pair:
        engine.shutdown()


def finals(engine: AsyncEngine, prompts: list, params, tag: str) -> list:
    """Each prompt as its own request, all at once; the final outputs in prompt order."""
    async def one(i, prompt):
        group = await engine.generate([prompt], params, f"{tag}{i}")
        return (await group.final_outputs())[0]

    async def run():
        return await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return asyncio.run(run())


async def idle(engine: AsyncEngine, timeout: float = 30.0) -> dict:
    """The engine's counters once nothing runs or waits."""
    deadline = time.monotonic() + timeout
    while True:
        snap = engine.snapshot()
        if not (snap["num_requests_running"] or snap["num_requests_waiting"]):
            return snap
        assert time.monotonic() < deadline, snap
        await asyncio.sleep(0.02)


def test_same_outputs_as_the_worker_thread_with_more_requests_than_slots(engines):
    process, thread = engines
    a, b = finals(process, PROMPTS, GREEDY, "p"), finals(thread, PROMPTS, GREEDY, "t")
    for x, y in zip(a, b):
        assert x.outputs[0].token_ids == y.outputs[0].token_ids and len(x.outputs[0].token_ids) == 12
        assert x.outputs[0].text == y.outputs[0].text and x.outputs[0].finish_reason == y.outputs[0].finish_reason
        assert x.prompt_token_ids == y.prompt_token_ids and x.prompt == y.prompt


FEATURES = {  # every sampling feature's state crosses the pipe with its request (the GPU's default worker)
    "seeded n=2, top-k/p, min-p": dict(n=2, temperature=0.9, top_k=20, top_p=0.9, min_p=0.05, seed=7),
    "logprobs and prompt logprobs": dict(temperature=0, logprobs=3, prompt_logprobs=2),
    "penalties, min tokens, stop ids": dict(temperature=0, repetition_penalty=1.3, presence_penalty=0.5,
                                            frequency_penalty=0.5, min_tokens=4, stop_token_ids=[5]),
    "logit bias, allowed ids": dict(temperature=0, logit_bias={7: 5.0}, allowed_token_ids=list(range(3, 400))),
    "bad words, stop strings": dict(temperature=0, bad_words=["the"], stop=["\n\n"], include_stop_str_in_output=True),
    "a JSON schema": dict(temperature=0, structured_outputs=StructuredOutputsParams(
        json={"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})),
    "a choice": dict(temperature=0, structured_outputs=StructuredOutputsParams(choice=["yes", "no"])),
}


@pytest.mark.parametrize("name", FEATURES)
def test_every_sampling_feature_gives_the_worker_threads_outputs(engines, name):
    process, thread = engines
    params = SamplingParams(max_tokens=10, **FEATURES[name])
    a, b = finals(process, PROMPTS[:3], params, f"p-{name}"), finals(thread, PROMPTS[:3], params, f"t-{name}")
    for x, y in zip(a, b):
        assert len(x.outputs) == params.n and x.outputs[0].token_ids  # the features took effect, and both agree
        assert (x.outputs[0].logprobs is not None) == (params.logprobs is not None)
        assert name != "a choice" or x.outputs[0].text in ("yes", "no")
        assert [(o.token_ids, o.text, o.finish_reason) for o in x.outputs] == \
            [(o.token_ids, o.text, o.finish_reason) for o in y.outputs]
        for mine, theirs in ((x.prompt_logprobs, y.prompt_logprobs), *((o.logprobs, p.logprobs)
                                                                       for o, p in zip(x.outputs, y.outputs))):
            assert close_logprobs(mine, theirs)


def close_logprobs(mine, theirs) -> bool:
    """The same tokens, ranks and text at each position, logprobs equal to float32 noise (steps batch differently)."""
    if mine is None or theirs is None:
        return mine is theirs
    return len(mine) == len(theirs) and all(
        (a is None) == (b is None) and (a is None or (a.keys() == b.keys() and all(
            a[t].rank == b[t].rank and a[t].decoded_token == b[t].decoded_token
            and abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a))) for a, b in zip(mine, theirs))


def test_every_delta_carries_its_prompt_and_the_deltas_add_up(engines):
    process, _ = engines

    async def run():
        group = await process.generate(["Hello there"], GREEDY, "deltas")
        return [d async for d in group]
    deltas = asyncio.run(run())
    final = finals(process, ["Hello there"], GREEDY, "deltas-final")[0]
    assert len(deltas) > 1 and deltas[-1].finished
    assert all(d.prompt_token_ids == final.prompt_token_ids and d.prompt == "Hello there" for d in deltas)
    assert [t for d in deltas for t in d.outputs[0].token_ids] == final.outputs[0].token_ids
    assert "".join(d.outputs[0].text for d in deltas) == final.outputs[0].text


def test_a_door_check_fails_in_the_caller_and_the_engine_stays_usable(engines):
    process, thread = engines

    async def bad(engine):
        with pytest.raises(ValueError, match="outside the vocabulary") as err:
            await engine.generate([{"prompt_token_ids": [10**9]}], GREEDY, "bad")
        return str(err.value)
    assert asyncio.run(bad(process)) == asyncio.run(bad(thread))
    assert len(finals(process, ["still here"], GREEDY, "after-bad")[0].outputs[0].token_ids) == 12


def test_an_abort_frees_the_blocks(engines):
    process, _ = engines
    long = SamplingParams(max_tokens=400, temperature=0, ignore_eos=True)

    async def run():
        group = await process.generate(["a long one"], long, "aborted")
        seen = 0
        async for delta in group:
            seen += len(delta.outputs[0].token_ids)
            if seen >= 3:
                break
        group.abort()
        return seen, await idle(process)
    seen, snap = asyncio.run(run())
    assert 3 <= seen < 400 and snap["kv_blocks_used"] == 0


def test_shutdown_ends_open_requests_and_the_child(tiny_model_dir):
    engine = in_process(tiny_model_dir)
    long = SamplingParams(max_tokens=450, temperature=0, ignore_eos=True)

    async def run():
        group = await engine.generate(["Hello"], long, "open")
        async for _ in group:
            threading.Thread(target=engine.shutdown).start()
            with pytest.raises(RequestAborted):
                async for _ in group:
                    pass
            return
    asyncio.run(run())
    child = engine.worker._process
    child.join(timeout=60)
    assert child.exitcode == 0

    async def after():
        with pytest.raises(RequestAborted):
            await engine.generate(["Hello"], GREEDY, "late")
    asyncio.run(after())
    engine.shutdown()  # twice is fine


def refuse(engine) -> None:
    """An on_start hook that fails in the child, as a model that cannot be served does."""
    raise ValueError(f"cannot serve this model ({engine.vocab_size} tokens)")


def collector_as_served(engine) -> None:
    """An on_start hook: the child must collect with the engine process's thresholds, not CPython's."""
    from nanoserve.entrypoints.engine_process import COLLECTOR_THRESHOLDS

    if gc.get_threshold() != COLLECTOR_THRESHOLDS:
        raise ValueError(f"the engine's process collects with thresholds {gc.get_threshold()}")


def parent_after_start(model_dir, measure: str) -> str:
    """What `measure` (an expression on `gc`) reads in a fresh interpreter once its EngineProcess is ready (this
    interpreter built an engine already, which froze its heap)."""
    import subprocess
    import sys

    code = ("import gc, sys; from nanoserve.engine.config import EngineConfig;"
            "from nanoserve.entrypoints.engine_process import EngineProcess;"
            f"w = EngineProcess(EngineConfig(model=sys.argv[1], **{ARGS!r})); seen = {measure};"
            "w.shutdown(); print(seen)")
    out = subprocess.run([sys.executable, "-c", code, str(model_dir)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_both_processes_collect_with_the_raised_threshold(tiny_model_dir):
    """The child's thresholds are checked there (a failing on_start raises here), the parent's after its start."""
    EngineProcess(EngineConfig(model=str(tiny_model_dir), **ARGS), on_start=collector_as_served).shutdown()
    assert parent_after_start(tiny_model_dir, "gc.get_threshold()") == "(10000, 10, 10)"


def test_an_engine_that_cannot_start_raises_in_the_parent(tiny_model_dir):
    config = EngineConfig(model=str(tiny_model_dir), **ARGS)
    with pytest.raises(ValueError, match="cannot serve this model"):
        EngineProcess(config, on_start=refuse)
    with pytest.raises(TypeError, match="EngineConfig"):
        EngineProcess(str(tiny_model_dir))


def test_the_http_server_over_an_engine_process(tiny_model_dir):
    """Stopping a server ends its engine's intake (end_all), so this test has engines of its own."""
    from nanoserve.entrypoints.launch import BackgroundServer
    from nanoserve.entrypoints.openai_server import build_app
    from nanoserve.serve import FrontendArgs

    process, thread = in_process(tiny_model_dir), AsyncEngine.from_args(tiny_model_dir, **ARGS)
    body = {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    texts = []
    for engine in (process, thread):
        server = BackgroundServer(build_app(engine, FrontendArgs(served_model_name="tiny"), str(tiny_model_dir)))
        server.start()
        try:
            ok = httpx.post(server.url + "/v1/completions", json=body, timeout=60, trust_env=False)
            too_long = httpx.post(server.url + "/v1/completions", json={**body, "max_tokens": 10**6}, timeout=60,
                                  trust_env=False)
            scraped = httpx.get(server.url + "/metrics", timeout=10, trust_env=False).text
        finally:
            server.stop()
            engine.shutdown()
        assert ok.status_code == 200 and too_long.status_code == 400
        assert "max_model_len" in too_long.json()["error"]["message"]
        assert "nanoserve:kv_blocks_total" in scraped or "kv_cache_usage_perc" in scraped
        texts.append(ok.json()["choices"][0]["text"])
    assert texts[0] == texts[1]


def test_the_child_ignores_ctrl_c(engines):
    """Ctrl-C signals a terminal's whole process group: the engine process lets the server decide."""
    import os
    import signal

    process, _ = engines
    os.kill(process.worker._process.pid, signal.SIGINT)
    time.sleep(0.5)
    assert process.worker._process.is_alive()
    assert len(finals(process, ["after Ctrl-C"], GREEDY, "sigint")[0].outputs[0].token_ids) == 12


def test_a_child_that_dies_ends_its_streams_and_new_requests_are_refused(tiny_model_dir):
    import os
    import signal

    engine = in_process(tiny_model_dir)
    long = SamplingParams(max_tokens=450, temperature=0, ignore_eos=True)

    async def run():
        group = await engine.generate(["Hello"], long, "doomed")
        with pytest.raises(RuntimeError, match="the engine process exited"):
            async for _ in group:
                os.kill(engine.worker._process.pid, signal.SIGKILL)
        with pytest.raises(RequestAborted):
            await engine.generate(["Hello"], GREEDY, "after")
    try:
        asyncio.run(asyncio.wait_for(run(), timeout=60))
    finally:
        engine.shutdown()


def test_a_request_cancelled_before_its_verdict_leaves_nothing_behind(engines):
    process, _ = engines
    long = SamplingParams(max_tokens=400, temperature=0, ignore_eos=True)

    async def run():
        task = asyncio.create_task(process.generate(["cancel me"], long, "early"))
        while not process.worker._pending and not task.done():
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await idle(process)
    snap = asyncio.run(run())
    assert snap["kv_blocks_used"] == 0
    assert not process.worker._live and not process.worker._dropped


def test_the_parent_freezes_its_start_up_heap(tiny_model_dir):
    """The parent builds no engine, so the engine process freezes its heap."""
    assert int(parent_after_start(tiny_model_dir, "gc.get_freeze_count()")) > 10_000  # the imports' objects, frozen
