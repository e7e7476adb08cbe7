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


# ---- issue 38: the offline gaps -------------------------------------------------------------
def test_greedy_n_above_one_is_refused_as_vllm_does():
    from nanoserve import SamplingParams

    with pytest.raises(ValueError, match="n must be 1 when using greedy sampling, got 2"):
        SamplingParams(n=2, temperature=0)
    assert SamplingParams(n=2, temperature=0.5).n == 2


def test_logprobs_true_means_one_and_spaces_between_special_tokens_only_true():
    from nanoserve import SamplingParams

    assert SamplingParams(logprobs=True).logprobs == 1 and SamplingParams(prompt_logprobs=False).prompt_logprobs == 0
    assert SamplingParams(spaces_between_special_tokens=True).spaces_between_special_tokens
    with pytest.raises(ValueError, match="spaces_between_special_tokens=False is not supported"):
        SamplingParams(spaces_between_special_tokens=False)
    with pytest.raises(TypeError, match="spaces_between_special_tokens"):
        SamplingParams(spaces_between_special_tokens="yes")


def test_load_format_auto_and_dummy_are_accepted_and_others_refused():
    assert EngineConfig("some/model", load_format="auto").load_format == "auto"
    assert EngineConfig("some/model", load_format="dummy").load_format == "dummy"  # random weights (see A5)
    with pytest.raises(ValueError, match=r"load_format must be one of \['auto', 'dummy'\], got 'bitsandbytes'"):
        EngineConfig("some/model", load_format="bitsandbytes")


def test_speculative_config_is_parsed_by_chapter_18():
    spec_decode = pytest.importorskip("nanoserve.engine.spec_decode")
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    parsed = EngineConfig("some/model", speculative_config=spec).speculative_config
    assert isinstance(parsed, spec_decode.SpeculativeConfig)
    assert EngineConfig("some/model").speculative_config is None
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        EngineConfig("some/model", speculative_config={**spec, "num_speculative_tokens": -1})


def test_generation_config_may_name_a_directory(tmp_path):
    import json

    from nanoserve import LLM

    path = make_tiny_checkpoint(tmp_path / "tiny", seed=4, max_position_embeddings=64)
    other = tmp_path / "gen"
    other.mkdir()
    (other / "generation_config.json").write_text(json.dumps({"temperature": 0.3, "top_k": 7, "max_new_tokens": 3}))
    with LLM(str(path), device="cpu", skip_tokenizer_init=True, block_size=4, num_kv_blocks=16,
             generation_config=str(other)) as llm:
        d = llm.get_default_sampling_params()
        assert (d.temperature, d.top_k, d.max_tokens) == (0.3, 7, 3)
    with pytest.raises(ValueError, match="generation_config must be 'auto'.*'vllm'.*or a directory"):
        EngineConfig(str(path), generation_config=str(tmp_path / "missing"))


def test_profiler_writes_a_trace_or_is_refused_by_name(llm, tmp_path, monkeypatch):
    from nanoserve import SamplingParams

    monkeypatch.delenv("VLLM_TORCH_PROFILER_DIR", raising=False)
    with pytest.raises(ValueError, match="VLLM_TORCH_PROFILER_DIR"):
        llm.start_profile()
    with pytest.raises(RuntimeError, match="start_profile"):
        llm.stop_profile()
    monkeypatch.setenv("VLLM_TORCH_PROFILER_DIR", str(tmp_path / "traces"))
    llm.start_profile()
    llm.generate("hello", SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    llm.stop_profile()
    assert any((tmp_path / "traces").iterdir())
    assert len(llm.generate("hello", SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids)



def test_profiler_config_as_vllm_spells_it(tmp_path, monkeypatch):
    """LLM(profiler_config={"profiler": "torch", "torch_profiler_dir": ...}), vLLM's way to turn tracing on."""
    from nanoserve import LLM, SamplingParams

    monkeypatch.delenv("VLLM_TORCH_PROFILER_DIR", raising=False)
    for bad, error in (({"profiler": "cuda"}, "profiler_config.profiler='cuda' is not supported"),
                       ({"torch_profiler_with_stack": True}, r"unsupported key\(s\) \['torch_profiler_with_stack'\]")):
        with pytest.raises(ValueError, match=error):
            EngineConfig(model="m", profiler_config=bad)
    with pytest.raises(TypeError, match="profiler_config must be a dict"):
        EngineConfig(model="m", profiler_config="torch")
    path = make_tiny_checkpoint(tmp_path / "tiny", seed=4, max_position_embeddings=64)
    traces = tmp_path / "traces"
    with LLM(str(path), device="cpu", skip_tokenizer_init=True, num_kv_blocks=16, block_size=4,
             profiler_config={"profiler": "torch", "torch_profiler_dir": str(traces)}) as llm:
        llm.start_profile()
        llm.generate({"prompt_token_ids": [1, 2]}, SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
        llm.stop_profile()
    assert any(traces.iterdir())

def test_chat_content_format_and_tokenization_kwargs(llm):
    from nanoserve import SamplingParams

    template = "{% for m in messages %}{% for part in m['content'] %}{{ part['text'] }}|{% endfor %}{% endfor %}"
    conv = [{"role": "user", "content": "hi there"}]
    greedy = SamplingParams(temperature=0, max_tokens=1)
    out = llm.chat(conv, greedy, use_tqdm=False, chat_template=template, chat_template_content_format="openai")[0]
    assert out.prompt == "hi there|"
    assert llm.chat(conv, greedy, use_tqdm=False, chat_template_content_format="string")[0].prompt
    with pytest.raises(ValueError, match="chat_template_content_format"):
        llm.chat(conv, greedy, use_tqdm=False, chat_template_content_format="jinja")
    with pytest.raises(ValueError, match="tokenization_kwargs"):
        llm.chat(conv, greedy, use_tqdm=False, tokenization_kwargs={"truncation": True})
    assert llm.chat(conv, greedy, use_tqdm=False, tokenization_kwargs=None)[0].outputs[0].token_ids


def test_cleanup_frees_the_engine(tmp_path):
    import weakref

    from nanoserve import LLM
    from nanoserve.llm import cleanup_dist_env_and_memory

    path = make_tiny_checkpoint(tmp_path / "tiny", seed=4, max_position_embeddings=64)
    llm = LLM(str(path), device="cpu", skip_tokenizer_init=True, block_size=4, num_kv_blocks=16)
    engine = weakref.ref(llm.engine)
    llm.shutdown()
    del llm
    cleanup_dist_env_and_memory()
    assert engine() is None
