"""vLLM's AsyncLLM: from_engine_args, generate as an async stream of RequestOutputs, abort, shutdown."""
import asyncio

from nanoserve import AsyncEngineArgs, AsyncLLM, SamplingParams
from nanoserve.entrypoints.async_engine import AsyncEngine
from nanoserve.outputs import RequestOutputKind


def test_generate_in_vllms_three_output_kinds_then_abort(tiny_model_dir):
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model_dir), device="cpu", max_model_len=1024,
                                                    num_kv_blocks=80))

    def params(kind=None, max_tokens=6):
        return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, output_kind=kind)

    async def collect(request_id, kind=None):
        return [out async for out in llm.generate("Hello", params(kind), request_id)]

    async def main():
        cumulative = await collect("a")
        lengths = [len(o.outputs[0].token_ids) for o in cumulative]  # vLLM's default: all so far, every time
        assert lengths == sorted(set(lengths)) and lengths[-1] == 6  # a step per output (merged if the reader lags)
        assert cumulative[-1].finished and not cumulative[0].finished and cumulative[-1].request_id == "a"
        whole = cumulative[-1].outputs[0]
        deltas = await collect("b", RequestOutputKind.DELTA)
        assert sum((o.outputs[0].token_ids for o in deltas), []) == whole.token_ids
        assert "".join(o.outputs[0].text for o in deltas) == whole.text
        final = await collect("c", RequestOutputKind.FINAL_ONLY)
        assert len(final) == 1 and final[0].outputs[0].token_ids == whole.token_ids

        seen = []

        async def long_one():
            async for out in llm.generate("Hello", params(max_tokens=900), "d"):
                seen.append(out)

        task = asyncio.create_task(long_one())
        while len(seen) < 2:
            await asyncio.sleep(0.005)
        await llm.abort("d")
        await asyncio.wait_for(task, 30)  # the aborted request's generator ends
        last = seen[-1]  # vLLM's abort: a last, finished output, all tokens so far, reason "abort"
        assert last.finished and last.outputs[0].finish_reason == "abort" and not seen[-2].finished
        assert len(last.outputs[0].token_ids) == len(seen[-2].outputs[0].token_ids) < 900
        assert len((await collect("d"))[-1].outputs[0].token_ids) == 6  # its id is free again, the engine serves

    try:
        asyncio.run(main())
    finally:
        llm.shutdown()


def test_request_ids_and_use_after_shutdown_fail_clearly(tiny_model_dir):
    """A request id is a str, two live requests cannot share one (even both being admitted), and a shut-down
    AsyncLLM refuses new requests by saying so."""
    import pytest

    from nanoserve.entrypoints.async_engine import RequestAborted

    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model_dir), device="cpu", max_model_len=1024,
                                                    num_kv_blocks=80))
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)

    async def collect(request_id):
        return [out async for out in llm.generate("Hello", params, request_id)]

    async def main():
        with pytest.raises(TypeError, match="request_id must be a str"):
            await collect(5)
        both = await asyncio.gather(collect("dup"), collect("dup"), return_exceptions=True)
        errors = [r for r in both if isinstance(r, Exception)]
        assert len(errors) == 1 and "request id 'dup' is already running" in str(errors[0])
        assert len(await collect("dup")) == 4  # free again once the first finished

    try:
        asyncio.run(main())
    finally:
        llm.shutdown()
    with pytest.raises(RequestAborted, match="shut down"):
        asyncio.run(collect("late"))


def test_steps_that_queued_up_while_the_reader_was_busy_come_out_as_one_delta(tiny_model_dir):
    engine = AsyncEngine.from_args(str(tiny_model_dir), device="cpu", max_model_len=1024, num_kv_blocks=80)
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    async def main():
        eager = [d async for d in await engine.generate(["Hello"], params, "eager")]
        late = await engine.generate(["Hello"], params, "late")
        while any(engine.snapshot()[k] for k in ("num_requests_running", "num_requests_waiting")):
            await asyncio.sleep(0.01)  # the reader is busy elsewhere until the request has finished
        await asyncio.sleep(0.2)  # and the last step's delivery has reached this loop
        merged = [d async for d in late]
        assert len(merged) == 1 and merged[0].finished
        assert merged[0].outputs[0].token_ids == sum((d.outputs[0].token_ids for d in eager), [])
        assert merged[0].outputs[0].text == "".join(d.outputs[0].text for d in eager)
        assert late.num_output_tokens["late-0"] == 8  # usage still counts every token

    try:
        asyncio.run(main())
    finally:
        engine.shutdown()
