"""OpenAI's Responses API (/v1/responses) through the official client: text in and out, function tools."""
import json

import httpx
import pytest

from conftest import MODEL_NAME

openai = pytest.importorskip("openai")
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                          "required": ["city"]}}


def test_text_in_text_out(client):
    r = client.responses.create(model=MODEL_NAME, input="Say hello.", instructions="Be brief.", max_output_tokens=5,
                                temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == MODEL_NAME
    assert [item.type for item in r.output] == ["message"] and r.output[0].content[0].type == "output_text"
    assert r.output_text == r.output[0].content[0].text and 1 <= r.usage.output_tokens <= 5
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.status == ("incomplete" if r.usage.output_tokens == 5 else "completed")
    same = client.chat.completions.create(model=MODEL_NAME, max_tokens=5, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}])
    assert r.output_text == same.choices[0].message.content  # the same chat request underneath
    assert r.usage.input_tokens == same.usage.prompt_tokens


def test_a_named_function_is_called(client):
    r = client.responses.create(model=MODEL_NAME, input="Weather in Paris?", tools=[WEATHER], max_output_tokens=64,
                                tool_choice={"type": "function", "name": "get_weather"}, temperature=0)
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].call_id.startswith("call_")
    assert json.loads(calls[0].arguments)["city"] in ("Paris", "Rome")


def test_message_items_with_a_call_and_its_output(client):
    history = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
               {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
               {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]
    short = client.responses.create(model=MODEL_NAME, input=history[:1], max_output_tokens=2, tools=[WEATHER],
                                    tool_choice="none")
    full = client.responses.create(model=MODEL_NAME, input=history, max_output_tokens=2, tools=[WEATHER],
                                   tool_choice="none")
    assert full.usage.input_tokens > short.usage.input_tokens + 10  # the call and its result are in the prompt


@pytest.mark.parametrize("extra,param", [({"stream": True}, "stream"), ({"previous_response_id": "resp_x"},
                                         "previous_response_id"), ({"input": [{"type": "web_search_call"}]}, "input"),
                                        ({"max_output_tokens": 0}, "max_output_tokens")])
def test_refusals_name_the_field(server, extra, param):
    body = {"model": MODEL_NAME, "input": "hi", **extra}
    r = httpx.post(server + "/v1/responses", json=body, timeout=30, trust_env=False)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
