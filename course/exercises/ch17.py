"""Checkers for chapter 17's exercises (structured outputs): each answer also goes through the engine's grammar."""
import json
import re
import tempfile

__all__ = ["CHECKS", "grammar_accepts"]

DATE_2026 = r"2026-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
DATES_IN = ["2026-01-01", "2026-02-29", "2026-03-20", "2026-07-04", "2026-09-30", "2026-10-15", "2026-11-09",
            "2026-12-31"]
DATES_OUT = ["2025-06-15", "2027-01-01", "2026-00-10", "2026-13-01", "2026-19-01", "2026-1-05", "2026-01-5",
             "2026-01-00", "2026-01-32", "2026-10-40", "2026/01/05", "20260105", " 2026-01-05", "2026-01-05 ",
             "2026-01-051",
             # digits of another script (Arabic-Indic), which \d matches and [0-9] does not
             "\u0662\u0660\u0662\u0666-\u0660\u0661-\u0660\u0665", "2026-0\u0661-05", "2026-1\u0661-05",
             "2026-01-1\u0665", "2026-01-2\u0669"]
CITIES_IN = [{"name": "Rome", "country": "Italy", "population": 2800000, "is_capital": True},
             {"name": "Zurich", "country": "Switzerland", "population": 420000, "is_capital": False},
             {"name": "McMurdo Station", "country": "Antarctica", "population": 0, "is_capital": False}]
CITIES_OUT = [({"name": "Rome", "country": "Italy", "population": 2800000}, "is_capital is missing"),
              ({"name": "Rome", "country": "Italy", "population": 2800000, "is_capital": True, "mayor": "?"},
               "an extra key"),
              ({"name": "Rome", "country": "Italy", "population": -1, "is_capital": True}, "a negative population"),
              ({"name": "Rome", "country": "Italy", "population": 2.5, "is_capital": True}, "a fractional population"),
              ({"name": "Rome", "country": "Italy", "population": "2800000", "is_capital": True},
               "a population written as a string"),
              ({"name": "Rome", "country": "Italy", "population": 2800000, "is_capital": "yes"},
               "is_capital written as a string"),
              ({"name": "R" * 41, "country": "Italy", "population": 1, "is_capital": False}, "a 41-character name"),
              ({"name": "Rome", "country": None, "population": 1, "is_capital": False}, "a null country")]

_TINY = {}  # one tiny random LLM with the real Qwen3 tokenizer per process, made on first use


def _tiny_llm():
    """A tiny random-weight LLM (Qwen3's tokenizer): the engine the checkers run answers through."""
    if "llm" not in _TINY:
        from nanoserve import LLM
        from nanoserve.model.tiny import make_tiny_checkpoint

        _TINY["dir"] = tempfile.TemporaryDirectory(prefix="ch17-exercise-")
        path = make_tiny_checkpoint(f"{_TINY['dir'].name}/tiny", with_tokenizer=True)
        _TINY["llm"] = LLM(path, device="cpu", max_model_len=128, max_num_seqs=8, num_kv_blocks=64, seed=0)
    return _TINY["llm"]


def _compiled(spec, what: str):
    """spec compiled for the tiny engine's vocabulary; an AssertionError with a hint when the grammar is refused."""
    llm = _tiny_llm()
    try:
        return spec.compile(llm.get_tokenizer(), llm.engine.vocab_size)
    except ValueError as err:
        raise AssertionError(f"hint: the engine refused your {what}: {err}") from None


def grammar_accepts(spec, text: str) -> bool:
    """Whether the engine's grammar for `spec` lets `text` through token by token and is complete at its end."""
    constraint = _compiled(spec, "grammar")
    ids = _tiny_llm().get_tokenizer().encode(text, add_special_tokens=False)
    for i, token in enumerate(ids):
        allowed = constraint.mask(ids[:i])
        if allowed is None or not bool(allowed[token]):
            return False
    constraint.advance(ids)
    return constraint.is_accepting


def check_date_regex(regex) -> str:
    """17.2: a regex for the dates of 2026, checked with `re` and then through the engine."""
    from nanoserve import SamplingParams
    from nanoserve.structured import StructuredOutputsParams

    if regex is None:
        raise NotImplementedError
    assert isinstance(regex, str), f"hint: the answer is a regular expression as a str, got {type(regex).__name__}"
    for date in DATES_IN:
        assert re.fullmatch(regex, date), f"hint: {date!r} is a date of 2026 and should match"
    for date in DATES_OUT:
        assert not re.fullmatch(regex, date), (
            f"hint: {date!r} should not match" + (": \\d also matches digits of other scripts, [0-9] does not"
                                                 if not date.isascii() else ""))
    spec = StructuredOutputsParams(regex=regex)
    _compiled(spec, "regex (llguidance's regexes have no look-arounds or back-references)")
    for date in DATES_IN[:2] + DATES_OUT[3:4]:
        assert grammar_accepts(spec, date) == (date in DATES_IN), (
            f"hint: Python's re and the engine's grammar disagree on {date!r}; keep to plain classes, groups and "
            "repeats")
    llm = _tiny_llm()
    outs = llm.generate(["Pick a date: "] * 8, [SamplingParams(temperature=1.0, seed=s, max_tokens=16,
                                                               structured_outputs=spec) for s in range(8)],
                        use_tqdm=False)
    dates = [o.outputs[0].text for o in outs]
    for date, out in zip(dates, outs):
        assert re.fullmatch(DATE_2026, date) and out.outputs[0].finish_reason == "stop", (
            f"hint: under your regex the random model wrote {date!r}, which is not a date of 2026")
    return f"the random model, forced through your regex, wrote {', '.join(dates)}"


def _in_schema_order(record: dict, schema: dict) -> dict:
    """The record with its keys in the order the schema lists them (the grammar writes them in that order)."""
    order = list(schema.get("properties", {}))
    return dict(sorted(record.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def check_city_schema(schema) -> str:
    """17.3: a JSON schema for a city record, checked with jsonschema and then through the engine's grammar."""
    import jsonschema

    from nanoserve.structured import StructuredOutputsParams

    if schema is None:
        raise NotImplementedError
    assert isinstance(schema, dict), f"hint: the answer is a JSON schema as a dict, got {type(schema).__name__}"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        raise AssertionError(f"hint: that is not a valid JSON schema: {err.message}") from None
    validator = jsonschema.Draft202012Validator(schema)
    for record in CITIES_IN:
        errors = [e.message for e in validator.iter_errors(record)]
        assert not errors, f"hint: {record} is a good city record, but your schema says: {errors[0]}"
    for record, why in CITIES_OUT:
        assert not validator.is_valid(record), f"hint: your schema accepts {record}, which has {why}"
    spec = StructuredOutputsParams(json=schema)
    _compiled(spec, "schema")
    for record in CITIES_IN[:2]:
        text = json.dumps(_in_schema_order(record, schema))
        assert grammar_accepts(spec, text), f"hint: the engine's grammar for your schema refuses {text}"
    for record, why in CITIES_OUT[1:3]:
        text = json.dumps(_in_schema_order(record, schema))
        assert not grammar_accepts(spec, text), f"hint: the engine's grammar lets {text} through, with {why}"
    return ("jsonschema and the engine's grammar agree: the good records pass, the bad ones are refused; "
            "now give the schema to the real model")


CHECKS = {"17.2": check_date_regex, "17.3": check_city_schema}
