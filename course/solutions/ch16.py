"""Solutions to chapter 16's exercises (serving)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def meets_slos(result, slos):
    """True when one request met every SLO (milliseconds)."""
    measured = {"ttft": 1e3 * (result.first_token - result.start), "e2el": 1e3 * (result.end - result.start),
                "tpot": 1e3 * (result.end - result.first_token) / (result.output_tokens - 1)
                if result.output_tokens > 1 else 0.0}
    return all(measured[name] <= limit for name, limit in slos.items())


def meets_slos_all_tokens(result, slos):
    """A typical mistake: TPOT over every token, the first one's wait included."""
    measured = {"ttft": 1e3 * (result.first_token - result.start), "e2el": 1e3 * (result.end - result.start),
                "tpot": 1e3 * (result.end - result.start) / result.output_tokens}
    return all(measured[name] <= limit for name, limit in slos.items())


def read_sse(lines):
    """The JSON payloads of an event stream's `data:` lines, up to `data: [DONE]`."""
    import json

    payloads = []
    for line in lines:
        if not line.startswith("data:"):
            continue  # a comment (": ...") or another field ("event: ...")
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            break
        payloads.append(json.loads(data))
    return payloads


def read_sse_with_space(lines):
    """A typical mistake: only `data: ` with its space counts, and [DONE] is skipped rather than final."""
    import json

    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


SOLUTIONS = {"16.1": meets_slos, "16.7": read_sse}
WRONG = {"16.1": meets_slos_all_tokens, "16.7": read_sse_with_space}
EXPLANATIONS = {
    "16.7": ("The prediction: 13 payloads for the 12-token answer. The server sends one chunk per engine step, "
             "so one per token here, and before the first of them a chunk that carries only the assistant's role "
             "(its content is the empty string): that one has no text. The last token's chunk also carries "
             "finish_reason 'length'. print(len(events)) under the reading cell shows the count."),
    "16.2": ("Scrape /metrics in a background task every 50 ms while the 50 requests stream, and parse the "
             "num_requests_waiting gauge. It starts at 42 (50 minus the 8 running), drops by one each time a "
             "running request finishes and a waiting one is admitted, and reaches 0 after about 42 finishes. "
             "With identical requests the batch turns over in waves of 8, so draining takes close to "
             "ceil(50 / 8) - 1 = 6 request durations, and the last request ends after about 7: the 50 / 8 "
             "estimate holds, a little above it because each wave's prefill delays the decodes running with it."),
    "16.3": ("Record, per request, when it reached the server, when the worker thread next called step(), and "
             "when its first token left. The first gap is waiting for the step in flight: on average half a "
             "step, at most a whole one. With long prompts at a high rate steps are long (mixed prefill and "
             "decode, tens of ms), so this wait is a visible part of TTFT at low load; under heavy load queueing "
             "in the scheduler (waiting for a free sequence slot or KV blocks) dominates instead."),
    "16.4": ("A route that calls the engine's tokenizer directly and returns {'tokens': ids, 'count': len(ids)} "
             "needs no engine step, so it does not touch the worker thread. Tokenizing runs on the event loop "
             "thread, which blocks every other connection while it runs: fine for prompts of a few thousand "
             "tokens (well under a millisecond with a fast tokenizer), not for megabyte inputs; for those, run "
             "it with asyncio.to_thread (fast tokenizers release the GIL) or cap the input length at the door."),
    "16.5": ("The timer lives on the event loop, next to the request's queue: wrap the wait for the request's "
             "outputs in asyncio.wait_for(..., timeout). On timeout, abort the request through the same path a "
             "client disconnect takes (the engine's owner thread takes the abort from its inbox between two "
             "steps, so the engine frees its blocks), and send an error event with code 504 before closing the "
             "stream. The worker thread and the engine need no change: a timeout is an abort with another reason."),
    "16.6": ("Run the client once per rate with --goodput ttft:500 tpot:50 and plot the p50 TTFT and TPOT. At low "
             "rates both stay flat and goodput equals the request rate; as the rate nears the server's capacity "
             "TPOT grows (bigger batches) and TTFT grows (prefills queue); past it TTFT explodes. Goodput peaks "
             "at the highest rate where the p99 of both still meets the SLOs, usually somewhat below the rate "
             "of maximum throughput: all at once (inf) gives the highest throughput and the lowest goodput."),
    "16.8": ("The reader thread's recv raises EOFError when the child dies, so it marks the worker stopping and ends "
             "every open request with RuntimeError('the engine process exited (code -9)'): the stream's reader "
             "raises it and the server sends its error event. Admissions still waiting get the same error, and a "
             "new generate() raises RequestAborted ('the engine is shut down'), which the server answers with 503. "
             "Nothing waits for a step that will never come. tests/serve/test_engine_process.py kills the child "
             "the same way. Restarting the child would need the requests' state, which died with it: vLLM too "
             "fails the open requests and stops."),
    "16.9": ("Without the freeze, the parent keeps every object its imports made (torch's, the tokenizer's: about "
             "400,000 on the project's CPU machine) in the oldest generation, and each full collection walks all of "
             "them while holding the interpreter lock: about 200 ms, once or twice in a burst of 200 streams there, "
             "with the HTTP loop stopped for that long. Frozen, a full collection walks only what came later (about "
             "10,000 objects) and takes tens of milliseconds. Young collections (generations 0 and 1) cost about the "
             "same either way, since they never look at the old objects. The freeze must come after a gc.collect(): "
             "garbage frozen with the heap could never be freed."),
}
