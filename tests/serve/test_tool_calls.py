"""Tool calls and structured outputs through the real `openai` client; the tool-call parsers on their own."""
import json

import pytest

from conftest import MODEL_NAME
from serve_marks import needs_structured
from nanoserve.entrypoints.tool_parsers import (HermesToolCalls, Llama3JsonToolCalls, NamedToolCall,
                                                RequiredToolCalls, tool_call_stream)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]},
                                                    "days": {"type": "integer", "enum": [1, 2, 3]}},
                   "required": ["city", "days"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
QWEN_ANSWER = ('I will look it up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
               '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>')




def valid_weather_args(arguments: str) -> bool:
    """The arguments JSON against WEATHER's schema, checked by hand (jsonschema is not a dependency)."""
    args = json.loads(arguments)
    return set(args) == {"city", "days"} and args["city"] in ("Paris", "Rome") and args["days"] in (1, 2, 3)


# the parsers, without a server

def stream_in_pieces(parser, text: str, size: int) -> tuple:
    pieces = [text[i:i + size] for i in range(0, len(text), size)] or [""]
    content, deltas = [], []
    for i, piece in enumerate(pieces):
        said, new = parser.deltas(piece, final=i == len(pieces) - 1)
        content.append(said)
        deltas += new
    return "".join(content), deltas


@pytest.mark.parametrize("size", [1, 2, 5, 11, 1000])
def test_hermes_parser_streamed_equals_whole(size):
    content, calls = HermesToolCalls().parse(QWEN_ANSWER)
    assert content == "I will look it up.\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"city": "Paris", "days": 2}),
                                                                  ("get_time", {"zone": "CET"})]
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id
    said, deltas = stream_in_pieces(HermesToolCalls(), QWEN_ANSWER, size)
    assert said == content
    assert [(d["index"], d["type"], d["function"]["name"], d["function"]["arguments"]) for d in deltas] == \
        [(i, "function", c.name, c.arguments) for i, c in enumerate(calls)]


def test_hermes_parser_leaves_text_without_calls_alone():
    for text in ("plain text", "a <tool_ tag that never closes", "<tool_call>\nnot json\n</tool_call> after"):
        content, calls = HermesToolCalls().parse(text)
        assert content == text and calls == []
        assert stream_in_pieces(HermesToolCalls(), text, 3) == (text, [])
    content, calls = HermesToolCalls().parse('<tool_call>{"name": "f", "arguments": {}}')  # cut off before its end tag
    assert content is None and [c.name for c in calls] == ["f"]


def test_parallel_tool_calls_false_keeps_the_first():
    content, calls = tool_call_stream("auto", None, "hermes", parallel=False).parse(QWEN_ANSWER)
    assert [c.name for c in calls] == ["get_weather"]


def test_llama3_json_parser():
    content, calls = Llama3JsonToolCalls().parse(
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome", "days": 1}}; '
        '{"name": "get_time", "parameters": {"zone": "UTC"}}')
    assert content is None and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Rome", "days": 1}), ("get_time", {"zone": "UTC"})]
    assert Llama3JsonToolCalls().parse("Hello {not a call}") == ("Hello {not a call}", [])
    assert Llama3JsonToolCalls().parse('{"no": "name"}') == ('{"no": "name"}', [])
    said, deltas = stream_in_pieces(Llama3JsonToolCalls(), '{"name": "get_time", "parameters": {"zone": "UTC"}}', 4)
    assert said == "" and [d["function"]["name"] for d in deltas] == ["get_time"]


def test_required_and_named_parsers():
    text = '[{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}, {"name": "get_time", "parameters": {"zone": "U]}"}}]'
    said, deltas = stream_in_pieces(RequiredToolCalls(), text, 3)
    assert said == "" and [(d["index"], d["function"]["name"]) for d in deltas] == [(0, "get_weather"), (1, "get_time")]
    assert json.loads(deltas[1]["function"]["arguments"]) == {"zone": "U]}"}
    named = NamedToolCall("get_weather")
    said, deltas = stream_in_pieces(named, '{"city": "Rome", "days": 1}', 5)
    assert deltas[0]["function"]["name"] == "get_weather" and deltas[0]["id"] == named.calls[0].id
    assert "".join(d["function"]["arguments"] for d in deltas) == named.calls[0].arguments == '{"city": "Rome", "days": 1}'
    assert all("name" not in d["function"] for d in deltas[1:])


# through the server

@pytest.fixture(scope="module")
def tool_client(start_server):
    import httpx
    openai = pytest.importorskip("openai")
    url = start_server("--enable-auto-tool-choice", "--tool-call-parser", "hermes").url
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                         http_client=httpx.Client(trust_env=False, timeout=120))


def test_auto_needs_the_server_flags(client):
    import openai

    with pytest.raises(openai.BadRequestError, match="enable-auto-tool-choice") as e:
        client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER], max_tokens=4)
    assert e.value.body["param"] == "tool_choice"
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER], tool_choice="none",
                                       max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    plain = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4, temperature=0,
                                           extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.tool_calls
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 50  # "none" still renders the tools


def test_auto_without_a_call_is_content(tool_client):
    kwargs = dict(model=MODEL_NAME, messages=ASK, tools=[WEATHER], max_tokens=6, temperature=0,
                  extra_body={"ignore_eos": True})
    whole = tool_client.chat.completions.create(**kwargs)
    chunks = list(tool_client.chat.completions.create(**kwargs, stream=True))
    assert whole.choices[0].finish_reason == "length" and whole.choices[0].message.tool_calls == []
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


@pytest.fixture(scope="module")
def llama_client(start_server):
    import httpx
    openai = pytest.importorskip("openai")
    url = start_server("--enable-auto-tool-choice", "--tool-call-parser", "llama3_json").url
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0,
                         http_client=httpx.Client(trust_env=False, timeout=120))


LLAMA_CALLS = '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; {"name": "get_time", "parameters": {"zone": "CET"}}'
HERMES_CALLS = QWEN_ANSWER.split("\n", 1)[1]  # the two calls, without the leading sentence


@needs_structured
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("parser", ["llama3_json", "hermes"])
def test_auto_parses_a_call_the_model_wrote(request, parser, stream):
    """The random model is made to write the calls by a regex constraint; the server's parser finds them."""
    import re

    tool_client = request.getfixturevalue("llama_client" if parser == "llama3_json" else "tool_client")
    forced = LLAMA_CALLS if parser == "llama3_json" else HERMES_CALLS
    kwargs = dict(model=MODEL_NAME, messages=ASK, tools=[WEATHER, CLOCK], max_tokens=200, temperature=0,
                  extra_body={"structured_outputs": {"regex": re.escape(forced)}})
    if not stream:
        r = tool_client.chat.completions.create(**kwargs)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        calls = [(c.type, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
        assert all(c.id.startswith("call_") for c in choice.message.tool_calls)
    else:
        chunks = list(tool_client.chat.completions.create(**kwargs, stream=True))
        deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
        assert [d.index for d in deltas] == [0, 1]
        calls = [(d.type, d.function.name, json.loads(d.function.arguments)) for d in deltas]
    assert calls == [("function", "get_weather", {"city": "Paris", "days": 2}), ("function", "get_time", {"zone": "CET"})]


@needs_structured
@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_choice_gives_schema_valid_arguments(client, stream):
    kwargs = dict(model=MODEL_NAME, messages=ASK, tools=[WEATHER, CLOCK], max_tokens=100, temperature=0,
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        assert choice.finish_reason == "stop" and len(choice.message.tool_calls) == 1
        call = choice.message.tool_calls[0]
        name, arguments = call.function.name, call.function.arguments
    else:
        chunks = list(client.chat.completions.create(**kwargs, stream=True))
        deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
        assert deltas[0].id.startswith("call_") and {d.index for d in deltas} == {0}
        name, arguments = deltas[0].function.name, "".join(d.function.arguments or "" for d in deltas)
    assert name == "get_weather" and valid_weather_args(arguments)


@needs_structured
def test_required_tool_choice_gives_valid_calls(client):
    # one call (parallel_tool_calls=false: maxItems 1), else a random model may go on adding calls to the array
    choice = client.chat.completions.create(model=MODEL_NAME, messages=ASK, tools=[WEATHER, CLOCK], max_tokens=200,
                                            temperature=0, tool_choice="required",
                                            parallel_tool_calls=False).choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    for call in choice.message.tool_calls:
        args = json.loads(call.function.arguments)
        assert (call.function.name == "get_weather" and valid_weather_args(call.function.arguments)) or \
            (call.function.name == "get_time" and args in ({"zone": "UTC"}, {"zone": "CET"}))


@needs_structured
def test_response_format_json_schema_validates(client):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]},
                                               "score": {"type": "integer", "enum": [1, 2, 3]}},
              "required": ["answer", "score"], "additionalProperties": False}
    r = client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=100, temperature=0,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "verdict", "schema": schema}},
                                       # no optional whitespace: a random model would pad with it to max_tokens
                                       extra_body={"structured_outputs": {"disable_any_whitespace": True}})
    value = json.loads(r.choices[0].message.content)
    assert set(value) == {"answer", "score"} and value["answer"] in ("yes", "no") and value["score"] in (1, 2, 3)


@needs_structured
def test_structured_outputs_choice_and_regex_constrain(client):
    pick = client.completions.create(model=MODEL_NAME, prompt="Pick one:", max_tokens=20, temperature=0,
                                     extra_body={"structured_outputs": {"choice": ["left", "right"]}})
    digits = client.completions.create(model=MODEL_NAME, prompt="A number:", max_tokens=20, temperature=0,
                                       extra_body={"structured_outputs": {"regex": "[0-9]{3}"}})
    assert pick.choices[0].text in ("left", "right")
    assert len(digits.choices[0].text) == 3 and digits.choices[0].text.isdigit()


def test_constraints_are_checked_at_the_door(client):
    import openai

    bad = [({"tool_choice": "required"}, "tool_choice"),  # no tools
           ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
           ({"tools": [{"type": "function"}], "tool_choice": "none"}, "tools"),
           ({"response_format": {"type": "xml"}}, "response_format"),
           ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
           ({"structured_outputs": {"whitespace_pattern": " "}}, "structured_outputs"),
           ({"response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"}}, "structured_outputs")]
    for extra, param in bad:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4, extra_body=extra)
        assert e.value.body["param"] == param, (extra, e.value.body)


@needs_structured
@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "not-a-type"}}}},
     "response_format"),
    ({"structured_outputs": {"json": {"type": "not-a-type"}}}, "structured_outputs"),
    ({"guided_json": {"type": "not-a-type"}}, "guided_json")])
def test_a_schema_the_grammar_compiler_refuses_names_the_field_sent(client, extra, param):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=ASK, max_tokens=4, extra_body=extra)
    assert e.value.body["param"] == param and e.value.body["message"].startswith(f"{param}: "), e.value.body
