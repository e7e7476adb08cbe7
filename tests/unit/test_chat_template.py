"""QWEN3_CHAT_TEMPLATE renders what Qwen3's official template renders (tools, tool calls, tool results,
reasoning), checked against expected strings written from Qwen3's documented prompt format; LLM.chat's
vLLM options."""
import json

import pytest

from nanoserve.llm import LLM, check_conversations
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.tokenizer import build_qwen3_tokenizer, load_tokenizer

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
TOOLS_SYSTEM = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(WEATHER) + "\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n")
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(build_qwen3_tokenizer(tmp_path_factory.mktemp("tok")))


def render(tok, messages, **kwargs):
    return tok.apply_chat_template(check_conversations(messages)[0], tokenize=False, **kwargs)


def test_plain_conversation_and_thinking_switch(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    base = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert render(tok, msgs, add_generation_prompt=True) == base
    assert render(tok, msgs, add_generation_prompt=True, enable_thinking=False) == base + "<think>\n\n</think>\n\n"


def test_tools_go_into_the_system_turn(tok):
    with_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
    assert render(tok, with_system, tools=[WEATHER], add_generation_prompt=True) == (
        "<|im_start|>system\nBe brief.\n\n" + TOOLS_SYSTEM
        + "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    assert render(tok, with_system[1:], tools=[WEATHER]) == (
        "<|im_start|>system\n" + TOOLS_SYSTEM + "<|im_start|>user\nWeather in Paris?<|im_end|>\n")


def test_tool_call_round_trip(tok):
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "reasoning_content": "Use the tool.", "tool_calls": [CALL]},
            {"role": "tool", "content": '{"temp_c": 21}'}, {"role": "tool", "content": "sunny"}]
    assert render(tok, msgs, add_generation_prompt=True) == (
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nUse the tool.\n</think>\n\n"
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response>\n"
        "<tool_response>\nsunny\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")


def test_tool_call_with_content_and_string_arguments(tok):
    call = {"function": {"name": "f", "arguments": '{"x": 1}'}}
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "Calling.", "tool_calls": [call, call]}]
    assert render(tok, msgs) == (
        "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nCalling.\n"
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n")


def test_reasoning_of_earlier_turns_is_dropped(tok):
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nold\n</think>\n\nA"},
            {"role": "user", "content": "b"}, {"role": "assistant", "content": "B", "reasoning_content": "new"}]
    assert render(tok, msgs) == (
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
        "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>\nnew\n</think>\n\nB<|im_end|>\n")


def test_check_conversations_reads_none_content_as_empty_and_checks_tool_calls():
    assert check_conversations([{"role": "assistant", "content": None, "tool_calls": [CALL]}])[0][0]["content"] == ""
    assert check_conversations([{"role": "assistant", "content": None}])[0][0]["content"] == ""  # as vLLM
    with pytest.raises(ValueError, match="tool_calls"):
        check_conversations([{"role": "user", "content": "x", "tool_calls": [CALL]}])
    with pytest.raises(ValueError, match=r"tool_calls\[0\]"):
        check_conversations([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": 1}}]}])


@pytest.fixture(scope="module")
def chat_llm(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-tok"), seed=4, with_tokenizer=True,
                                max_position_embeddings=256)
    return LLM(str(path), device="cpu", block_size=4, num_kv_blocks=128)


def test_chat_options_reach_the_template(chat_llm):
    one = SamplingParams(temperature=0, max_tokens=1)
    msgs = [{"role": "user", "content": "Weather?"}]
    assert TOOLS_SYSTEM in chat_llm.chat(msgs, one, tools=[WEATHER], use_tqdm=False)[0].prompt
    off = chat_llm.chat(msgs, one, chat_template_kwargs={"enable_thinking": False}, use_tqdm=False)[0].prompt
    assert off.endswith("<think>\n\n</think>\n\n")
    assert chat_llm.chat(msgs, one, chat_template_kwargs={"enable_thinking": False}, enable_thinking=True,
                         use_tqdm=False)[0].prompt.endswith("assistant\n")
    cont = chat_llm.chat(msgs + [{"role": "assistant", "content": "It is"}], one, add_generation_prompt=False,
                         continue_final_message=True, use_tqdm=False)[0].prompt
    assert cont.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nIt is")  # open: no <|im_end|>
    custom = chat_llm.chat(msgs, one, chat_template="{% for m in messages %}[{{ m.content }}]{% endfor %}",
                           use_tqdm=False)[0].prompt
    assert custom == "[Weather?]"


@pytest.mark.parametrize("kwargs,error,word", [
    (dict(continue_final_message=True), ValueError, "continue_final_message"),
    (dict(tools={"a": 1}), TypeError, "tools"), (dict(chat_template_kwargs=[1]), TypeError, "chat_template_kwargs"),
    (dict(chat_template=3), TypeError, "chat_template"), (dict(add_generation_prompt=None), TypeError, "add_generation"),
])
def test_bad_chat_options_are_refused(chat_llm, kwargs, error, word):
    with pytest.raises(error, match=word):
        chat_llm.chat([{"role": "user", "content": "x"}], use_tqdm=False, **kwargs)


@pytest.mark.parametrize("template, cause", [
    ("{{ undefined_fn() }}", "UndefinedError"),  # a name the template does not have
    ("{{ raise_exception('no system turns here') }}", "TemplateError"),  # the template's own refusal
    ("{% for m in messages %}", "TemplateSyntaxError"),  # never closed
])
def test_a_failing_chat_template_is_a_value_error_and_the_engine_goes_on(chat_llm, template, cause):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match=f"chat template.*{cause}") as err:
        chat_llm.chat(msgs, SamplingParams(max_tokens=3), chat_template=template, use_tqdm=False)
    assert err.value.__cause__ is not None  # jinja's own error stays attached for debugging
    assert not chat_llm.engine.has_unfinished_requests()
    out = chat_llm.chat(msgs, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 3
