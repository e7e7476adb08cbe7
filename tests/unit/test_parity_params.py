"""vLLM's LLM(...) keyword arguments and SamplingParams fields: mapped, accepted or refused by name."""
import json

import pytest

from nanoserve.engine.detokenizer import IncrementalDetokenizer
from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.logits_processors import bad_word_bans


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), seed=3, max_position_embeddings=64)


def make_llm(path, **kwargs):
    kwargs = {"block_size": 4, "num_kv_blocks": 32, **kwargs}
    return LLM(str(path), device="cpu", skip_tokenizer_init=True, **kwargs)


# ---- LLM(...) options ------------------------------------------------------------------------
@pytest.mark.parametrize("option,value", [("quantization", "awq"), ("kv_cache_dtype", "fp8"),
                                          ("tokenizer_mode", "mistral"), ("generation_config", "hf")])
def test_unsupported_values_are_refused_by_name(checkpoint, option, value):
    with pytest.raises(ValueError, match=option):
        make_llm(checkpoint, **{option: value})


def test_unknown_keyword_is_a_type_error_naming_it(checkpoint):
    with pytest.raises(TypeError, match="no_such_option"):
        make_llm(checkpoint, no_such_option=1)


def test_accepted_options(checkpoint):
    llm = make_llm(checkpoint, trust_remote_code=True, disable_log_stats=True, tokenizer_mode="auto",
                   kv_cache_dtype="auto", quantization=None, revision="main", download_dir="unused")
    out = llm.generate({"prompt_token_ids": [1, 2]}, SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) <= 3
    with pytest.raises(TypeError, match="trust_remote_code"):
        make_llm(checkpoint, trust_remote_code="yes")


def test_revision_and_download_dir_reach_the_hub_download(monkeypatch, tmp_path):
    import huggingface_hub

    seen = {}

    def fake_download(repo_id, **kwargs):
        seen.update(kwargs, repo_id=repo_id)
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    with pytest.raises(ValueError, match="cannot find model"):
        make_llm("some-org/some-model", revision="v1.0", download_dir=str(tmp_path))
    assert seen["repo_id"] == "some-org/some-model"
    assert seen["revision"] == "v1.0" and seen["cache_dir"] == str(tmp_path)


def test_chunked_prefill_off_needs_a_budget_of_max_model_len(checkpoint):
    llm = make_llm(checkpoint, enable_chunked_prefill=False, max_model_len=40)
    assert llm.config.max_num_batched_tokens >= 40
    with pytest.raises(ValueError, match="enable_chunked_prefill"):
        make_llm(checkpoint, enable_chunked_prefill=False, max_model_len=40, max_num_batched_tokens=16)
    # a 30-token prompt runs in one step although the default budget would also chunk nothing here
    out = llm.generate({"prompt_token_ids": list(range(1, 31))}, SamplingParams(temperature=0, max_tokens=2),
                       use_tqdm=False)[0]
    assert llm.engine.stats.num_steps == len(out.outputs[0].token_ids)


# ---- generation_config.json defaults ----------------------------------------------------------
@pytest.fixture
def with_generation_config(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "gen", seed=3, max_position_embeddings=64)
    data = json.loads((path / "generation_config.json").read_text())
    data.update(temperature=0.0, top_p=0.8, top_k=20, min_p=0.05, repetition_penalty=1.1, max_new_tokens=5,
                do_sample=True)
    (path / "generation_config.json").write_text(json.dumps(data))
    return path


def test_generation_config_auto_sets_the_default_sampling_params(with_generation_config):
    llm = make_llm(with_generation_config)
    d = llm.get_default_sampling_params()
    assert (d.temperature, d.top_p, d.top_k, d.min_p, d.repetition_penalty, d.max_tokens) == (0.0, 0.8, 20, 0.05, 1.1, 5)
    prompt = {"prompt_token_ids": [1, 2, 3]}
    default = llm.generate(prompt, use_tqdm=False)[0].outputs[0]
    explicit = llm.generate(prompt, SamplingParams(temperature=0.0, top_p=0.8, top_k=20, min_p=0.05,
                                                   repetition_penalty=1.1, max_tokens=5), use_tqdm=False)[0].outputs[0]
    assert default.token_ids == explicit.token_ids and len(default.token_ids) <= 5
    assert [d.token_ids for d in llm.stream(prompt)] and sum(len(d.token_ids) for d in llm.stream(prompt)) <= 5


def test_generation_config_vllm_ignores_the_file(with_generation_config):
    assert make_llm(with_generation_config, generation_config="vllm").get_default_sampling_params() == SamplingParams()


def test_a_bad_generation_config_names_the_file(with_generation_config):
    (with_generation_config / "generation_config.json").write_text(json.dumps({"temperature": -1}))
    with pytest.raises(ValueError, match="generation_config.json"):
        make_llm(with_generation_config)
    assert make_llm(with_generation_config, generation_config="vllm")  # the way out the message names


# ---- SamplingParams fields ------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,error,word", [
    (dict(prompt_logprobs=-2), ValueError, "prompt_logprobs"), (dict(prompt_logprobs=1.5), TypeError, "prompt_logprobs"),
    (dict(include_stop_str_in_output=1), TypeError, "include_stop_str_in_output"),
    (dict(skip_special_tokens=None), TypeError, "skip_special_tokens"),
    (dict(logit_bias=[1, 2]), TypeError, "logit_bias"), (dict(logit_bias={"a": 1}), TypeError, "logit_bias"),
    (dict(logit_bias={1: float("nan")}), TypeError, "logit_bias"), (dict(allowed_token_ids=[]), ValueError, "allowed"),
    (dict(allowed_token_ids=[-1]), ValueError, "allowed_token_ids"), (dict(bad_words=[1]), TypeError, "bad_words"),
    (dict(bad_words=[" "]), TypeError, "bad_words"),
])
def test_bad_fields_are_refused(kwargs, error, word):
    with pytest.raises(error, match=word):
        SamplingParams(**kwargs)


def test_logit_bias_is_clamped_and_json_keys_become_ids():
    p = SamplingParams(logit_bias={"7": 500, 3: -2.5})
    assert p.logit_bias == {7: 100.0, 3: -2.5}
    assert SamplingParams(bad_words="word").bad_words == ["word"]


def test_engine_refuses_token_ids_outside_the_vocabulary(checkpoint):
    llm = make_llm(checkpoint)
    vocab = llm.engine.vocab_size
    for kwargs, name in ((dict(logit_bias={vocab: 1.0}), "logit_bias"), (dict(allowed_token_ids=[vocab]), "allowed")):
        with pytest.raises(ValueError, match=name):
            llm.generate({"prompt_token_ids": [1]}, SamplingParams(**kwargs), use_tqdm=False)
    with pytest.raises(ValueError, match="bad_words need a tokenizer"):
        llm.generate({"prompt_token_ids": [1]}, SamplingParams(bad_words=["x"]), use_tqdm=False)


def test_bad_word_bans_follow_the_output():
    words = [[5], [1, 2], [1, 2, 3]]
    assert bad_word_bans(words, []) == [5]
    assert bad_word_bans(words, [9, 1]) == [5, 2]
    assert bad_word_bans(words, [1, 2]) == [5, 3]
    assert bad_word_bans(words, [2, 1, 3]) == [5]


# ---- detokenizer: stop strings kept or cut, special tokens kept or skipped ---------------------
class CharTokenizer:
    """One character per token id (ord), with id 0 a special token '<s>'; no DecodeStream (not a fast tokenizer)."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join("" if i == 0 and skip_special_tokens else ("<s>" if i == 0 else chr(i)) for i in ids)


@pytest.mark.parametrize("include", [False, True])
def test_detokenizer_stop_strings(include):
    det = IncrementalDetokenizer(CharTokenizer(), stop=["END"], include_stop_str_in_output=include)
    streamed = ""
    for ch in "hello ENDING":
        det.add([ord(ch)])
        streamed += det.delta(False)
        if det.stop_string:
            break
    streamed += det.delta(True)
    assert det.stop_string == "END"
    assert det.text == streamed == ("hello END" if include else "hello ")


def test_detokenizer_special_tokens():
    kept = IncrementalDetokenizer(CharTokenizer(), skip_special_tokens=False)
    skipped = IncrementalDetokenizer(CharTokenizer())
    for det in (kept, skipped):
        det.add([ord("a"), 0, ord("b")])
    assert kept.text == "a<s>b" and skipped.text == "ab"
