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
    return "the same rows the token table's references name"


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


def core_with_lookup(lookup):
    """AsyncEngineCore whose token table resolves staged references with `lookup(input_ids, table)`."""
    from nanoserve.engine.async_core import AsyncEngineCore

    class ReadersAsyncEngineCore(AsyncEngineCore):
        """Chapter 11's core; the reader's lookup resolves the references in front of the embedding."""

    ReadersAsyncEngineCore.lookup = staticmethod(lookup)
    return ReadersAsyncEngineCore


def _lookup_cases() -> list:
    """(what, input_ids, table) covering prefills, decodes and a mixed step."""
    import torch

    table = torch.arange(100, 108, dtype=torch.int64)  # 8 rows
    t = lambda xs: torch.tensor(xs, dtype=torch.int64)
    return [("a prefill (no row reads the table)", t([7, 8, 9]), table),
            ("three decodes", t([-5, -1, -8]), table),
            ("a decode beside a prompt chunk", t([-3, 11, 12, 13]), table),
            ("a chunk that ends at its pending token", t([21, 22, -6, -2]), table),
            ("an empty step", t([]), table)]


def _engine_tokens(core_class) -> tuple:
    """Greedy tokens of the tiny engine one step ahead on this CPU: the chapter's core, then `core_class`."""
    from nanoserve import LLM, SamplingParams
    from nanoserve.engine import async_core

    prompts = [dict(prompt_token_ids=list(range(3 + 5 * i, 9 + 7 * i))) for i in range(3)]
    params = SamplingParams(temperature=0, max_tokens=5)
    kwargs = dict(skip_tokenizer_init=True, device="cpu", block_size=4, num_kv_blocks=64, async_scheduling=True)
    runs = []
    for cls in (async_core.AsyncEngineCore, core_class):
        built, async_core.AsyncEngineCore = async_core.AsyncEngineCore, cls
        try:
            llm = LLM(_tiny_checkpoint(), **kwargs)
        finally:
            async_core.AsyncEngineCore = built
        runs.append([o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)])
    return tuple(runs)


def check_table_lookup(table_input_ids) -> str:
    """11.5 (build it yourself): each row's input id from the table or the staged ids, without asking the host."""
    import torch

    from nanoserve.engine.async_core import table_input_ids as reference

    for what, ids, table in _lookup_cases():
        before = [x.clone() for x in (ids, table)]
        got = table_input_ids(ids, table)
        assert all(torch.equal(a, b) for a, b in zip(before, (ids, table))), \
            f"hint: with {what} your lookup changed one of its inputs; build a new tensor instead"
        assert isinstance(got, torch.Tensor) and got.shape == ids.shape and got.dtype == torch.int64, \
            f"hint: with {what} return an int64 tensor shaped like input_ids, got {got!r}"
        assert torch.equal(got, reference(ids, table)), (
            f"hint: with {what}, staged ids {ids.tolist()} gave {got.tolist()}: a row that stages a reference "
            "-1 - row reads that row of the table, every other row keeps its staged id")
        try:
            on_meta = table_input_ids(ids.to("meta"), table.to("meta"))
        except (RuntimeError, NotImplementedError) as err:
            raise AssertionError(
                "hint: your lookup looks at the values on the host (item, tolist, a boolean mask, a Python loop), "
                "which a CUDA graph cannot replay and which stalls the one-step-ahead loop: choose per row with "
                f"torch.where on tensors only (on tensors without data it failed with: {str(err)[:80]})") from None
        assert on_meta.shape == ids.shape, f"hint: with {what} on tensors without data your result has shape " \
                                           f"{tuple(on_meta.shape)}, expected {tuple(ids.shape)}"
    try:
        want, got = _engine_tokens(core_with_lookup(table_input_ids))
    except (IndexError, RuntimeError) as err:
        raise AssertionError("hint: the engine one step ahead read its ids through yours and failed "
                             f"({type(err).__name__}: {str(err)[:80]}): does every reference become an id?") from None
    assert got == want, f"hint: the engine one step ahead read its ids through yours and gave {got}, expected {want}"
    return "the engine one step ahead gives the same greedy tokens through your lookup; set USE_MY_TOKEN_LOOKUP = True"


CHECKS = {"11.1": check_token_rows, "11.2": check_wasted_lanes, "11.4": check_predict_calls,
          "11.5": check_table_lookup}
