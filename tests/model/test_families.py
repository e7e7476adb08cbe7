"""Qwen2/Qwen2.5 and Llama 3 checkpoints run on the one decoder and match transformers token for token."""
import json
import shutil

import pytest
import torch
from hf_reference import hf_greedy, hf_model
from test_engine_parity import PROMPT_LENS, MAX_TOKENS, assert_no_leaks, count_preemptions, generate, prompts_of

from nanoserve.llm import LLM
from nanoserve.model.loader import checkpoint_shapes, load_config, load_qwen3
from nanoserve.model.tiny import TINY_LLAMA3_ROPE, make_tiny_checkpoint

# family, config overrides: untied heads keep random-weight greedy output from collapsing onto one token
CASES = {
    "qwen2": ("qwen2", {}),
    "qwen2.5-untied": ("qwen2", {"tie_word_embeddings": False, "max_position_embeddings": 64}),
    "llama3-untied": ("llama", {"tie_word_embeddings": False}),
    "llama-linear-rope": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "head_dim": 32,
                                    "num_attention_heads": 2, "num_key_value_heads": 1}),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    family, overrides = CASES[request.param]
    path = make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), family=family, seed=3, **overrides)
    return path, hf_model(path)


def test_configs_have_the_family_switches(case):
    path, _ = case
    config = load_config(path)
    names = set(checkpoint_shapes(config))
    has_bias = "model.layers.0.self_attn.q_proj.bias" in names
    assert has_bias == (config.model_type == "qwen2")
    assert "model.layers.0.self_attn.o_proj.bias" not in names
    assert "model.layers.0.self_attn.q_norm.weight" not in names


def test_logits_equal_transformers(case):
    path, hf = case
    ours = load_qwen3(path)
    ids = torch.randint(0, 512, (60,), generator=torch.Generator().manual_seed(0))  # past original_max (32)
    with torch.no_grad():
        got = ours.compute_logits(ours(ids, torch.arange(60)))
        want = hf(ids[None]).logits[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def make_llm(path, **kwargs):
    return LLM(path, **{"skip_tokenizer_init": True, "block_size": 4, "num_kv_blocks": 128, **kwargs})


@pytest.mark.parametrize("prefix", [False, True], ids=["plain", "prefix-cache"])
def test_greedy_batch_equals_transformers(case, prefix):
    path, hf = case
    prompts = prompts_of(PROMPT_LENS)
    want = [hf_greedy(hf, p, m) for p, m in zip(prompts, MAX_TOKENS)]
    assert len({t for w in want for t in w}) > 3  # not a degenerate repeat-one-token model
    llm = make_llm(path, enable_prefix_caching=prefix)
    assert generate(llm, prompts, MAX_TOKENS) == want
    assert_no_leaks(llm)


def test_chunked_prefill_and_preemption_change_nothing(case):
    path, hf = case
    prompts = prompts_of(PROMPT_LENS)
    want = [hf_greedy(hf, p, m) for p, m in zip(prompts, MAX_TOKENS)]
    tight = make_llm(path, num_kv_blocks=8, max_num_batched_tokens=5, max_num_seqs=5, enable_prefix_caching=True)
    preempted = count_preemptions(tight)
    assert generate(tight, prompts, MAX_TOKENS) == want
    assert preempted, "the cache was meant to be too small for the whole batch"
    assert_no_leaks(tight)


def test_llama3_rope_really_rescales(tmp_path):
    """Dropping the llama3 scaling changes the logits: the test above would notice a plain-RoPE model."""
    path = make_tiny_checkpoint(tmp_path / "l", family="llama", seed=3, tie_word_embeddings=False)
    plain = tmp_path / "plain"
    shutil.copytree(path, plain)
    data = json.loads((plain / "config.json").read_text())
    data["rope_scaling"] = data["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    (plain / "config.json").write_text(json.dumps(data))
    ids = torch.arange(40) % 512
    with torch.no_grad():
        a, b = (m.compute_logits(m(ids, torch.arange(40))) for m in (load_qwen3(path), load_qwen3(plain)))
    assert (a - b).abs().max() > 1e-3
    assert load_config(path).rope_parameters["factor"] == TINY_LLAMA3_ROPE["factor"]


def test_eos_list_stops_on_each(tmp_path):
    path = make_tiny_checkpoint(tmp_path, family="llama", eos_token_id=[5, 9])
    assert LLM(path, skip_tokenizer_init=True, num_kv_blocks=16).engine.eos_token_ids == {5, 9}


# -- what is refused, naming the deciding field ---------------------------------------------------------------
@pytest.mark.parametrize("fields, match", [
    ({"model_type": "qwen3_moe"}, "model_type 'qwen3_moe'.*mixture-of-experts"),
    ({"model_type": "mixtral"}, "model_type 'mixtral'.*mixture-of-experts"),
    ({"model_type": "gemma"}, "model_type 'gemma'"),
    ({"num_experts": 8}, "num_experts=8.*mixture-of-experts"),
    ({"num_local_experts": 4}, "num_local_experts=4"),
    ({"use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ({"sliding_window": 4096}, "sliding_window=4096"),  # Mistral-style: no use_sliding_window switch
    ({"vision_config": {"hidden_size": 8}}, "vision_config.*multimodal"),
    ({"quantization_config": {"quant_method": "awq"}}, "quantization_config.*quantized"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.*'dynamic'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor"),
])
def test_unsupported_models_are_refused_naming_the_field(tmp_path, fields, match):
    path = make_tiny_checkpoint(tmp_path, family="llama")
    data = json.loads((path / "config.json").read_text())
    data.update(fields)
    (path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=match) as err:
        load_config(path)
    assert "config.json" in str(err.value)


def test_qwen2_window_switched_off_is_accepted(tmp_path):
    path = make_tiny_checkpoint(tmp_path, family="qwen2", use_sliding_window=False, sliding_window=4096)
    assert load_config(path).model_type == "qwen2"
