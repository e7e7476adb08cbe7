"""The engine reads config.json without transformers, and reads the same values transformers would give it."""
import json
import pickle

import pytest

from nanoserve.engine.config import kv_block_bytes
from nanoserve.model.config import ModelConfig
from nanoserve.model.loader import checkpoint_shapes, load_config
from nanoserve.model.qwen3 import attention_switches, head_dim, rope_theta
from nanoserve.model.rope_scalings import rope_scaling
from nanoserve.model.tiny import FAMILIES, QWEN3_0_6B_CONFIG, TINY_LLAMA3_ROPE, tiny_config

# every attribute the package reads off a model config directly (the rest goes through the helpers below)
FIELDS = ("model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
          "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "hidden_act",
          "tie_word_embeddings", "dtype", "bos_token_id", "eos_token_id", "pad_token_id")

# tiny transformers configs, saved by transformers itself: family, overrides
TINY = {
    "qwen3": ("qwen3", {}),
    "qwen3-biased-untied": ("qwen3", {"attention_bias": True, "tie_word_embeddings": False, "head_dim": 24}),
    "qwen3-bf16-eos": ("qwen3", {"torch_dtype": "bfloat16", "vocab_size": 151936}),
    "qwen2": ("qwen2", {}),
    "qwen2-untied-eos-list": ("qwen2", {"tie_word_embeddings": False, "eos_token_id": [3, 7]}),
    "llama3-rope": ("llama", {}),
    "llama-linear-rope": ("llama", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}),
    "llama-plain-rope": ("llama", {"rope_scaling": None, "attention_bias": True}),
}
SMALL = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2}
# hand-written config.json files: real models' shapes, and files that leave optional fields out
RAW = {
    "qwen3-0.6b": QWEN3_0_6B_CONFIG,
    "qwen2.5-0.5b-shape": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
                           "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
                           "num_key_value_heads": 2, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
                           "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": False,
                           "tie_word_embeddings": True, "vocab_size": 151936, "bos_token_id": 151643,
                           "eos_token_id": 151643, "torch_dtype": "bfloat16"},
    "llama-3.2-1b-shape": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                           "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                           "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
                           "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": True,
                           "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                           "vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]},
    "qwen3-bare": {"model_type": "qwen3", **SMALL},
    "no-model-type": dict(SMALL),
    "qwen2-bare": {"model_type": "qwen2", **SMALL},
    "qwen2-head-dim-given": {"model_type": "qwen2", **SMALL, "head_dim": 32},
    "qwen2-no-kv-heads": {"model_type": "qwen2", **SMALL, "num_attention_heads": 32, "num_key_value_heads": None},
    "llama-bare": {"model_type": "llama", **{k: v for k, v in SMALL.items() if k != "num_key_value_heads"}},
    "llama-null-fields": {"model_type": "llama", **SMALL, "head_dim": None, "num_key_value_heads": None,
                          "rope_scaling": None, "bos_token_id": None, "eos_token_id": None},
    "llama3-rope-parameters": {"model_type": "llama", **SMALL, "max_position_embeddings": 64,
                               "rope_parameters": {**TINY_LLAMA3_ROPE, "rope_theta": 500000.0}},
    "llama-old-type-key": {"model_type": "llama", **SMALL, "rope_scaling": {"type": "linear", "factor": 4.0}},
    "qwen3-default-rope-entry": {"model_type": "qwen3", **SMALL, "rope_theta": 1e6,
                                 "rope_scaling": {"rope_type": "default"}},
    "qwen3-both-dtypes": {"model_type": "qwen3", **SMALL, "dtype": "float16", "torch_dtype": "bfloat16"},
    "qwen3-window-off": {"model_type": "qwen3", **SMALL, "use_sliding_window": False, "sliding_window": 4096},
}


def what_nanoserve_reads(config) -> dict:
    """Every value the engine takes from a model config, read the way the engine reads it."""
    values = {field: getattr(config, field, None) for field in FIELDS}
    values.update({"attention_bias": getattr(config, "attention_bias", False), "head_dim": head_dim(config),
                   "rope_theta": rope_theta(config),
                   "rope_scaling": rope_scaling(config), "attention_switches": attention_switches(config),
                   "checkpoint_shapes": checkpoint_shapes(config)})
    return values


def both_readings(path):
    """(ours, transformers') config of the checkpoint directory `path`."""
    data = json.loads((path / "config.json").read_text())
    return load_config(path), FAMILIES[data.get("model_type", "qwen3")][0].from_pretrained(str(path))


def assert_same(ours, theirs):
    assert isinstance(ours, ModelConfig)
    got, want = what_nanoserve_reads(ours), what_nanoserve_reads(theirs)
    assert got == want, {k: (got[k], want[k]) for k in got if got[k] != want[k]}
    if hasattr(theirs, "rope_parameters"):  # transformers >= 5 keeps every RoPE setting in this one dict
        assert ours.rope_parameters == theirs.rope_parameters


@pytest.mark.parametrize("name", list(TINY))
def test_tiny_configs_read_as_transformers_reads_them(tmp_path, name):
    family, overrides = TINY[name]
    tiny_config(family, **overrides).save_pretrained(str(tmp_path))
    assert_same(*both_readings(tmp_path))


@pytest.mark.parametrize("name", list(RAW))
def test_hand_written_configs_read_as_transformers_reads_them(tmp_path, name):
    (tmp_path / "config.json").write_text(json.dumps(RAW[name]))
    assert_same(*both_readings(tmp_path))


def test_defaults_and_derived_values():
    bare = ModelConfig.from_dict({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4})
    assert (bare.head_dim, bare.num_key_value_heads, bare.bos_token_id, bare.eos_token_id) == (16, 4, 1, 2)
    assert bare.rope_parameters == {"rope_type": "default", "rope_theta": 10000.0} and rope_scaling(bare) is None
    assert ModelConfig.from_dict({"hidden_size": 64, "num_attention_heads": 4}).head_dim == 128  # Qwen3's default
    assert ModelConfig.from_dict({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4}).head_dim == 16


def test_the_callers_dict_is_left_alone():
    data = json.loads(json.dumps(RAW["llama-3.2-1b-shape"]))
    config = ModelConfig.from_dict(data)
    assert data == RAW["llama-3.2-1b-shape"] and config.rope_parameters["rope_theta"] == 500000.0


def test_model_config_survives_pickling():
    """Tensor-parallel workers receive the engine's model config through a pickle."""
    config = ModelConfig.from_dict(QWEN3_0_6B_CONFIG)
    again = pickle.loads(pickle.dumps(config))
    assert again == config and type(again) is ModelConfig


def test_engine_sizes_agree_for_both_kinds_of_config():
    import torch

    ours, theirs = ModelConfig.from_dict(QWEN3_0_6B_CONFIG), FAMILIES["qwen3"][0](**QWEN3_0_6B_CONFIG)
    want = 2 * 28 * 16 * 8 * 128 * 2  # k and v, layers, block size, kv heads, head_dim, bytes per bf16
    assert kv_block_bytes(ours, 16, torch.bfloat16) == kv_block_bytes(theirs, 16, torch.bfloat16) == want
