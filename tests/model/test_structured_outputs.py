"""Structured outputs (chapter 17): every format holds on a random model, sync and one step ahead, at the door too."""
import json
import re

import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

pytest.importorskip("llguidance")
from nanoserve.structured import StructuredOutputsParams  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "count": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "count"], "additionalProperties": False}
PROMPT = "Give me JSON:"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("so"), seed=3, with_tokenizer=True, max_position_embeddings=256)


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def llm(checkpoint, request):
    return LLM(checkpoint, block_size=4, num_kv_blocks=96, max_num_seqs=4, seed=0, async_scheduling=request.param)


def check_schema(value):
    """SCHEMA's rules, checked by hand (no jsonschema dependency)."""
    assert set(value) <= {"name", "count", "tags"} and {"name", "count"} <= set(value), value
    assert isinstance(value["name"], str) and len(value["name"]) <= 8
    assert isinstance(value["count"], int) and 0 <= value["count"] <= 999
    assert all(t in ("a", "b") for t in value.get("tags", [])) and len(value.get("tags", [])) <= 3


def spec_params(spec, **kw):
    return SamplingParams(structured_outputs=spec, max_tokens=kw.pop("max_tokens", 60), **kw)


def test_every_format_holds_greedy_and_sampled(llm):
    cases = [
        (StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True), lambda t: check_schema(json.loads(t))),
        (StructuredOutputsParams(json=json.dumps(SCHEMA), disable_any_whitespace=True),
         lambda t: check_schema(json.loads(t))),
        (StructuredOutputsParams(regex=r"[0-9]{3}-[a-c]{2}"), lambda t: re.fullmatch(r"[0-9]{3}-[a-c]{2}", t) or pytest.fail(t)),
        (StructuredOutputsParams(choice=["yes", "no", "maybe"]), lambda t: t in ("yes", "no", "maybe") or pytest.fail(t)),
        (StructuredOutputsParams(grammar='start: "<" WORD ">"\nWORD: /[xyz]{1,4}/'),
         lambda t: re.fullmatch(r"<[xyz]{1,4}>", t) or pytest.fail(t)),
    ]
    for spec, check in cases:
        for temperature, seed in ((0.0, None), (1.0, 5)):
            out = llm.generate(PROMPT, spec_params(spec, temperature=temperature, seed=seed), use_tqdm=False)[0]
            check(out.outputs[0].text)
            assert out.outputs[0].finish_reason == "stop", out.outputs[0]


def test_json_object_and_n_completions_each_constrained(llm):
    spec = StructuredOutputsParams(json_object=True, disable_any_whitespace=True)
    out = llm.generate(PROMPT, spec_params(spec, n=3, temperature=1.0, seed=2, max_tokens=120), use_tqdm=False)[0]
    assert len(out.outputs) == 3
    for completion in out.outputs:
        if completion.finish_reason == "stop":
            assert isinstance(json.loads(completion.text), dict)
        else:  # cut by max_tokens: still a prefix of an object
            assert completion.text.startswith("{")


def test_constrained_and_free_requests_share_a_batch(llm):
    spec = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    params = [SamplingParams(temperature=1.0, seed=s, max_tokens=30) for s in range(3)]
    params.insert(1, spec_params(spec, temperature=1.0, seed=9))
    outs = llm.generate([PROMPT] * 4, params, use_tqdm=False)
    check_schema(json.loads(outs[1].outputs[0].text))
    alone = llm.generate(PROMPT, params[0], use_tqdm=False)[0].outputs[0]
    assert outs[0].outputs[0].token_ids == alone.token_ids  # the free row is unaffected by its neighbour


def test_preemption_keeps_the_constraint(checkpoint):
    # 16 blocks of 4 tokens for 4 sequences of ~45 tokens each: the scheduler must preempt and recompute
    llm = LLM(checkpoint, block_size=4, num_kv_blocks=16, max_num_seqs=4, seed=0)
    spec = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    outs = llm.generate([PROMPT * 5] * 4, [spec_params(spec, temperature=1.0, seed=s, max_tokens=40) for s in range(4)], use_tqdm=False)
    assert llm.engine.scheduler.num_preemptions > 0
    for out in outs:
        if out.outputs[0].finish_reason == "stop":
            check_schema(json.loads(out.outputs[0].text))


@pytest.mark.parametrize("kwargs, error", [
    ({}, ValueError), ({"json": SCHEMA, "regex": "a"}, ValueError), ({"choice": []}, TypeError),
    ({"regex": 3}, TypeError), ({"json": 5}, TypeError), ({"choice": ["a", ""]}, TypeError),
])
def test_bad_specs_are_refused_when_made(kwargs, error):
    with pytest.raises(error):
        StructuredOutputsParams(**kwargs)


def test_bad_grammars_are_refused_at_the_door_and_the_engine_goes_on(llm):
    for spec in (StructuredOutputsParams(regex="(unclosed"), StructuredOutputsParams(grammar="start: undefined_rule"),
                 StructuredOutputsParams(json='{"type": "object"'), StructuredOutputsParams(json={"type": "nonsense"})):
        with pytest.raises(ValueError, match="structured_outputs"):
            llm.generate(PROMPT, spec_params(spec), use_tqdm=False)
    with pytest.raises(TypeError, match="structured_outputs"):
        SamplingParams(structured_outputs={"json": SCHEMA})  # a dict is not a spec
    assert not llm.engine.has_unfinished_requests()
    out = llm.generate(PROMPT, spec_params(StructuredOutputsParams(choice=["ok"])), use_tqdm=False)[0]
    assert out.outputs[0].text == "ok"


@pytest.mark.parametrize("clash", [dict(allowed_token_ids=[5]), dict(bad_words=["7"]), dict(min_tokens=3)],
                         ids=["allowed_token_ids", "bad_words", "min_tokens"])
def test_rules_whose_masks_fight_the_grammar_are_refused_when_made(llm, clash):
    # each of these used to break the grammar: allowed_token_ids=[5] gave '!&&&&', min_tokens gave 'red!!!...'
    (name,) = clash
    for spec in (StructuredOutputsParams(regex="[0-9]+"), StructuredOutputsParams(choice=["red", "blue"]),
                 StructuredOutputsParams(json_object=True)):
        with pytest.raises(ValueError, match=rf"^{name} cannot be combined with structured_outputs"):
            SamplingParams(max_tokens=5, structured_outputs=spec, **clash)
    # each alone is served, and a grammar with the fields at their neutral values too
    SamplingParams(max_tokens=5, **clash)
    out = llm.generate(PROMPT, SamplingParams(max_tokens=5, temperature=0, min_tokens=0, bad_words=[],
                                              structured_outputs=StructuredOutputsParams(choice=["red", "blue"])),
                       use_tqdm=False)[0].outputs[0]
    assert out.text in ("red", "blue") and out.finish_reason == "stop"


def test_a_grammar_that_fails_half_way_ends_the_output_instead_of_freeing_it(llm):
    """a{1000000} compiles, then outgrows llguidance's lexer: the output stops, as a prefix of the grammar."""
    params = [spec_params(StructuredOutputsParams(regex="a{1000000}"), temperature=t, max_tokens=12, seed=1)
              for t in (0.0, 1.0)]
    for out in llm.generate([PROMPT] * 2, params, use_tqdm=False):
        c = out.outputs[0]
        assert c.text and set(c.text) == {"a"} and c.finish_reason == "stop", (c.text, c.finish_reason)
    assert not llm.engine.has_unfinished_requests()


def test_a_spec_must_check_the_params_it_rides_on():
    class CompileOnly:
        def compile(self, tokenizer, vocab_size):
            return None

    with pytest.raises(TypeError, match="check_params"):
        SamplingParams(structured_outputs=CompileOnly())


def test_without_a_tokenizer_the_request_is_refused(checkpoint):
    llm = LLM(checkpoint, skip_tokenizer_init=True, num_kv_blocks=32, block_size=4)
    with pytest.raises(ValueError, match="tokenizer"):
        llm.generate({"prompt_token_ids": [1, 2, 3]}, spec_params(StructuredOutputsParams(choice=["a"])), use_tqdm=False)


def test_added_tokens_that_are_not_special_are_text_to_the_grammar(llm):
    # Qwen3's <tool_call> is an added token that is not special: a grammar spelling it must be able to emit it
    target = '<tool_call>\n{"name": "f"}\n</tool_call>'
    spec = StructuredOutputsParams(regex=re.escape(target))
    out = llm.generate(PROMPT, spec_params(spec, temperature=0.0), use_tqdm=False)[0].outputs[0]
    assert out.text == target and out.finish_reason == "stop"


def test_masks_of_many_rows_at_once_equal_one_at_a_time(checkpoint):
    import torch

    from nanoserve.logits_processors import apply_constraints
    from nanoserve.tokenizer import load_tokenizer

    tok = load_tokenizer(checkpoint)
    vocab = 151936
    specs = [StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True), StructuredOutputsParams(choice=["ab", "c"]),
             StructuredOutputsParams(regex="[0-9]+")]
    histories = [tok.encode('{"name":"x', add_special_tokens=False), [], tok.encode("12", add_special_tokens=False)]
    logits = torch.randn(4, vocab)
    together = logits.clone()
    apply_constraints(together, [specs[0].compile(tok, vocab), None, specs[1].compile(tok, vocab),
                                 specs[2].compile(tok, vocab)], [histories[0], [], histories[1], histories[2]])
    for row, spec, ids in ((0, specs[0], histories[0]), (2, specs[1], histories[1]), (3, specs[2], histories[2])):
        alone = logits[row].clone()
        spec.compile(tok, vocab).mask_logits(alone, ids)
        assert torch.equal(alone, together[row])
    assert torch.equal(together[1], logits[1])  # the row without a constraint is untouched
