"""Values the door accepts must not fail later: bounds for every number that reaches a tensor."""
import json
import math

import pytest
import torch

from nanoserve.engine.config import EngineConfig, gpu_kv_cache_bytes, kv_cache_fits
from nanoserve.entrypoints.limits import MAX_JSON_DEPTH, parse_json
from nanoserve.entrypoints.protocol import RequestError
from nanoserve.llm import check_conversations
from nanoserve.sampling import SamplingParams
from nanoserve.sampler import Sampler

GiB = 2**30


def test_top_k_beyond_the_vocabulary_keeps_every_token():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(top_k=2**63, top_p=0.9, seed=1), SamplingParams(top_k=10**30), SamplingParams(top_k=50)]
    tokens = Sampler(torch.Generator().manual_seed(0))(logits, params, [torch.Generator().manual_seed(1), None, None])
    assert tokens.shape == (3,) and ((0 <= tokens) & (tokens < 50)).all()


@pytest.mark.parametrize("top_p", [1e-50, 5e-324, 1e-6])
def test_a_tiny_top_p_keeps_the_most_likely_token(top_p):
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    for seed in range(5):
        tokens = Sampler(torch.Generator().manual_seed(seed))(logits, [SamplingParams(top_p=top_p)] * 4)
        assert tokens.tolist() == logits.argmax(dim=-1).tolist()


@pytest.mark.parametrize("temperature", [3.5e38, 1e39, math.inf])
def test_a_temperature_beyond_float32_is_refused(temperature):
    with pytest.raises(ValueError, match="temperature must be in"):
        SamplingParams(temperature=temperature)


def test_the_hottest_temperature_keeps_banned_tokens_banned():
    """At the bound, logits / T stays finite where they were and -inf where a rule banned a token."""
    logits = torch.randn(2, 50, generator=torch.Generator().manual_seed(0))
    logits[:, :48] = -math.inf  # only tokens 48 and 49 remain, as allowed_token_ids would leave them
    tokens = Sampler(torch.Generator().manual_seed(0))(logits, [SamplingParams(temperature=3.4e38, seed=s)
                                                                for s in range(2)])
    assert set(tokens.tolist()) <= {48, 49}


def test_logit_bias_keys_are_ascii_digits_or_ints():
    assert SamplingParams(logit_bias={"5": 1.0, 7: -2.0}).logit_bias == {5: 1.0, 7: -2.0}
    for key in ("\u0663", "\uff15", " 5", "5.0"):  # Arabic-Indic three, fullwidth five: digits to str.isdigit
        with pytest.raises(TypeError, match="logit_bias keys"):
            SamplingParams(logit_bias={key: 1.0})


@pytest.mark.parametrize("penalty", [1e-320, 1e-6, 0.0, -1.0, 1e6, 1e300, math.inf])
def test_repetition_penalty_outside_float32_safe_range_is_rejected(penalty):
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=penalty)


@pytest.mark.parametrize("penalty", [1e-5, 1e5])
def test_repetition_penalty_at_its_bounds_keeps_logits_finite(penalty):
    from nanoserve.logits_processors import Penalties
    from nanoserve.sampler import SamplingBatch, apply_processors

    logits = torch.randn(1, 50) * 30
    logits[0, 3] = 0.0
    params = [SamplingParams(repetition_penalty=penalty)]
    out = apply_processors(logits, SamplingBatch(params, [None], prompt_token_ids=[[3, 4, 5]], output_token_ids=[[6]],
                                                 processors=[Penalties()]))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_engine_seed_must_fit_in_64_bits(seed):
    with pytest.raises(ValueError, match="seed"):
        EngineConfig("some/model", seed=seed)
    EngineConfig("some/model", seed=2**64 - 1)


def test_a_tokenizer_of_the_wrong_type_is_named():
    with pytest.raises(TypeError, match="tokenizer"):
        EngineConfig("some/model", tokenizer=123)


def test_a_kv_cache_larger_than_memory_is_refused_naming_the_arguments():
    with pytest.raises(ValueError, match="num_kv_blocks or block_size"):
        kv_cache_fits(10**12, 8192, 16 * GiB, "cpu")
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_cache_fits(10**6, 2**20, 16 * GiB, "cuda")
    kv_cache_fits(1000, 8192, 16 * GiB, "cpu")


def test_a_second_engine_asking_for_more_than_is_free_is_refused():
    total, others, weights, activations = 140 * GiB, GiB, 2 * GiB, 3 * GiB
    first = gpu_kv_cache_bytes(total, total - others - weights, others, weights, activations, 0.6)
    free_now = total - others - weights - first - weights
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        gpu_kv_cache_bytes(total, free_now, others, weights, activations, 0.6)
    assert gpu_kv_cache_bytes(total, free_now, others, weights, activations, 0.3) > 0


def test_text_content_parts_are_joined_and_bad_messages_named():
    conv = check_conversations([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                             {"type": "text", "text": "b"}]}])
    assert conv == [[{"role": "user", "content": "a\nb"}]]
    cases = [
        ([{"role": 3, "content": "x"}], TypeError, "message 0.*role"),
        ([{"role": "user", "content": 5}], TypeError, "message 0.*content"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], ValueError, "message 0.*part 0"),
        ([[{"role": "user", "content": "a"}], [{"role": "user", "content": ["x"]}]], ValueError,
         "conversation 1, message 0.*part 0"),
        ([{"role": "user", "content": "a"}, "hello"], TypeError, "message 1"),
    ]
    for messages, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            check_conversations(messages)


@pytest.mark.parametrize("depth,accepted", [(63, True), (64, False)])
def test_json_nesting_counts_the_numbers_inside_the_deepest_list(depth, accepted):
    raw = ("[" * depth + "1, 2.5, true, null" + "]" * depth).encode()
    assert MAX_JSON_DEPTH == 64
    if accepted:
        assert parse_json(raw) is not None
    else:
        with pytest.raises(RequestError, match="nested deeper than 64"):
            parse_json(raw)


def test_a_lone_surrogate_after_many_token_ids_is_found_and_named():
    assert len(parse_json(json.dumps({"prompt": list(range(5000))}).encode())["prompt"]) == 5000
    with pytest.raises(RequestError, match="lone UTF-16 surrogate") as e:
        parse_json(json.dumps({"prompt": [[*range(5000), "\ud800"]]}).encode())
    assert e.value.param == "prompt"
