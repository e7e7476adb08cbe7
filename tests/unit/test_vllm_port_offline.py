"""vLLM names and readings the offline API takes as vLLM does (issue 38's first gaps)."""
import pytest
import torch

from nanoserve.engine.config import EngineConfig
from nanoserve.llm import check_conversations
from nanoserve.model.tiny import make_tiny_checkpoint

CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


@pytest.mark.parametrize("alias, dtype", [("half", torch.float16), ("float", torch.float32)])
def test_vllm_dtype_aliases_are_accepted(alias, dtype):
    assert EngineConfig("some/model", dtype=alias).dtype == dtype


def test_an_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="dtype.*'half'.*float8"):
        EngineConfig("some/model", dtype="float8")


def test_tokens_prompt_and_request_output_kind_come_from_the_top_level():
    import nanoserve
    from nanoserve import RequestOutputKind, TextPrompt, TokensPrompt

    assert TokensPrompt(prompt_token_ids=[1, 2]) == {"prompt_token_ids": [1, 2]}
    assert TextPrompt(prompt="hi") == {"prompt": "hi"}
    assert {k.name for k in RequestOutputKind} >= {"DELTA", "FINAL_ONLY"}
    assert {"TokensPrompt", "TextPrompt", "RequestOutputKind"} <= set(nanoserve.__all__) & set(dir(nanoserve))


@pytest.mark.parametrize("message", [
    {"role": "assistant", "tool_calls": []},
    {"role": "assistant", "content": None, "tool_calls": []},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "assistant"},
])
def test_missing_content_is_empty_content(message):
    conv = check_conversations([{"role": "user", "content": "Weather in Paris?"}, message])[0]
    assert conv[1]["content"] == "" and conv[1].get("tool_calls") == message.get("tool_calls")


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    from nanoserve import LLM

    path = make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-tok"), seed=4, with_tokenizer=True,
                                max_position_embeddings=256)
    with LLM(str(path), device="cpu", dtype="float", block_size=4, num_kv_blocks=128) as llm:
        yield llm


def test_llm_chat_takes_an_assistant_turn_without_content(llm):
    from nanoserve import SamplingParams, TokensPrompt

    conv = [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "tool_calls": [CALL]},
            {"role": "tool", "content": "sunny"}]
    out = llm.chat(conv, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) >= 1
    again = llm.generate(TokensPrompt(prompt_token_ids=out.prompt_token_ids), SamplingParams(temperature=0, max_tokens=2),
                         use_tqdm=False)[0]
    assert again.outputs[0].token_ids == out.outputs[0].token_ids
