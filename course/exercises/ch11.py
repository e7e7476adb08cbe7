"""Checkers for chapter 11's exercises (the host one step ahead)."""
import functools

from course.solutions.ch11 import token_rows as _token_rows  # the reference the reader's answer is compared with

__all__ = ["CHECKS"]


def check_token_rows(token_rows) -> str:
    """11.1: which rows of a step's flattened input ids read their id from the token table, and from which slot."""
    cases = [([1], [0], [True]), ([5, 1], [-1, 3], [True, True]), ([3, 1, 6], [2, 0, 4], [False, True, True]),
             ([4], [7], [True]), ([2, 2], [1, -1], [True, True])]
    for case in cases:
        want = _token_rows(*case)
        got = token_rows(*[list(x) for x in case])
        if list(got) != want:
            raise AssertionError(f"token_rows{case} = {got!r}, expected {want}: only the LAST row of a chunk is its "
                                 "sequence's newest token, and only a sequence that holds a slot (>= 0) reads it")
    return "the same token_rows prepare_step_inputs builds"


def _wasted(stop_steps, max_tokens):
    return sum(1 for s, m in zip(stop_steps, max_tokens) if s is not None and s < m)


def check_wasted_lanes(wasted_lanes) -> str:
    """11.2: one wasted lane per eos stop the host learns a step late (never for a max_tokens stop)."""
    cases = [([None], [5]), ([3], [5]), ([5], [5]), ([1, None, 4, 8], [8, 8, 8, 8]), ([2, 2, 2], [3, 2, 10])]
    for case in cases:
        want, got = _wasted(*case), wasted_lanes(*[list(x) for x in case])
        if got != want:
            raise AssertionError(f"wasted_lanes{case} = {got!r}, expected {want}: the next step is launched before "
                                 "the eos reaches the host, unless that token was the last one max_tokens allows "
                                 "(the scheduler knows the length limit in advance)")
    return "one lane per eos that arrives before max_tokens"


@functools.lru_cache(maxsize=1)
def _tiny_checkpoint() -> str:
    """A tiny random checkpoint on disk, written once per process."""
    import tempfile
    from pathlib import Path

    import transformers

    from nanoserve.model.tiny import make_tiny_checkpoint

    transformers.utils.logging.disable_progress_bar()
    return str(make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=3, tie_word_embeddings=False))


def measured_calls(arrivals, max_tokens, async_scheduling) -> int:
    """Run the tiny CPU engine: add request i after arrivals[i] calls of step(); count the calls until done."""
    from nanoserve.engine.engine import LLMEngine
    from nanoserve.sampling import SamplingParams

    engine = LLMEngine.from_args(_tiny_checkpoint(), device="cpu", dtype="float32", skip_tokenizer_init=True,
                                 block_size=4, num_kv_blocks=64, async_scheduling=async_scheduling)
    calls = 0
    while calls <= max(arrivals) or engine.has_unfinished_requests():
        for i, (at, m) in enumerate(zip(arrivals, max_tokens)):
            if at == calls:
                engine.add_request(f"r{i}", [5 + i, 6, 7], SamplingParams(temperature=0, max_tokens=m, ignore_eos=True))
        engine.step()
        calls += 1
    return calls


def check_predict_calls(predict_calls) -> str:
    """11.4: the reader's predicted step() calls against the count the engine really takes, both loops."""
    cases = [([0], [3]), ([0, 0], [1, 4]), ([0, 2], [5, 2]), ([0, 1, 4], [2, 6, 3])]
    for arrivals, max_tokens in cases:
        for overlap in (False, True):
            got = predict_calls(list(arrivals), list(max_tokens), overlap)
            want = measured_calls(arrivals, max_tokens, overlap)
            if got != want:
                raise AssertionError(f"predict_calls({arrivals}, {max_tokens}, async_scheduling={overlap}) = {got!r}, "
                                     f"but the engine took a different number of calls: when does the call that "
                                     "returns a request's last token happen, in each loop?")
    return "your prediction matches the engine's count in both loops"


CHECKS = {"11.1": check_token_rows, "11.2": check_wasted_lanes, "11.4": check_predict_calls}
