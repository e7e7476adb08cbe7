"""Written answers to appendix A5's exercises (the engine's front end)."""

__all__ = ["EXPLANATIONS"]

EXPLANATIONS = {
    "A5.1": (
        "Move `IncrementalDetokenizer.add` out of the step: the output processor puts (request id, new\n"
        "token ids) on a queue and a thread decodes and finds stop strings. Two things must stay\n"
        "ordered: a stop string found by the thread must still reach `core.finish` before the\n"
        "sequence's next token is wasted (at most one extra step if the thread lags), and deltas must\n"
        "be emitted in order. On a streaming run of 256 requests the step loses the per-token decode\n"
        "time (a few microseconds per token with DecodeStream), which matters only when the GPU step\n"
        "is short; measure both wall time and time between tokens."),
    "A5.2": (
        "A prompt id outside the vocabulary, an empty prompt, a prompt over max_model_len, a text\n"
        "prompt without a tokenizer and logprobs over max_logprobs are the input processor's\n"
        "(`InputProcessor.process`: prompt_token_ids, check_prompt_ids, _check_length, _check_params).\n"
        "A prompt of the wrong type and params that are not SamplingParams are refused by LLM's own\n"
        "helpers (_as_prompt_list, _as_params_list) before any request is built. The unknown argument\n"
        "is LLM's check_vllm_option_names, before EngineConfig is even created. generate() builds and\n"
        "checks every request first and queues them only when all passed, so one bad prompt leaves\n"
        "the engine untouched."),
    "A5.3": (
        "Time the parts with timeit on one request (a 72-token prompt, greedy, ignore_eos): on the CPU\n"
        "box prompt_token_ids (with check_prompt_ids) is the largest part, about 5 us; for_completion,\n"
        "Sequence and _check_params are each about 1.5-2 us, and the rest of process (about 22 us in all)\n"
        "is spread over a dozen small steps: the request id, the logprobs rewrite, check_drawable, the\n"
        "Request dataclass. No single part dominates any more. Handing the caller's SamplingParams to the sequence\n"
        "without the copy would save about 2 us, but it is not safe: the engine caches is_plain on its\n"
        "copy (read every step), the copy carries n=1 and a derived seed, and a caller who edits the\n"
        "object after submitting, to reuse it for the next call, would change a running request."),
}
