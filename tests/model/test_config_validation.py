"""config.json and checkpoint tensors are checked at the door, with errors naming the file, field or tensor."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from nanoserve.model.loader import load_config, load_qwen3, load_weights, resolve_model_path
from nanoserve.model.qwen3 import Qwen3ForCausalLM
from nanoserve.model.tiny import make_tiny_checkpoint, tiny_qwen3_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def with_config(checkpoint, tmp_path, text: str):
    """A copy of the checkpoint whose config.json is `text`."""
    shutil.copy(checkpoint / "model.safetensors", tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(text)
    return tmp_path


def edited_config(checkpoint, tmp_path, **fields):
    data = json.loads((checkpoint / "config.json").read_text())
    data.update(fields)
    return with_config(checkpoint, tmp_path, json.dumps(data))


@pytest.mark.parametrize("text, match", [
    ("[1, 2]", "must hold a JSON object.*list"),
    ('{"vocab_size": 5,', "not valid JSON"),
])
def test_malformed_json_names_the_file(checkpoint, tmp_path, text, match):
    path = with_config(checkpoint, tmp_path, text)
    with pytest.raises(ValueError, match=match) as err:
        load_config(path)
    assert "config.json" in str(err.value)


@pytest.mark.parametrize("field, value", [
    ("vocab_size", -5), ("num_attention_heads", 0), ("num_key_value_heads", 0), ("hidden_size", 0),
    ("intermediate_size", "128"), ("num_hidden_layers", 1.5), ("head_dim", 0), ("rms_norm_eps", 0),
])
def test_bad_sizes_name_the_file_and_field(checkpoint, tmp_path, field, value):
    path = edited_config(checkpoint, tmp_path, **{field: value})
    with pytest.raises(ValueError, match=field) as err:
        load_config(path)
    assert "config.json" in str(err.value)


def test_kv_heads_must_divide_heads(checkpoint, tmp_path):
    path = edited_config(checkpoint, tmp_path, num_key_value_heads=3)
    with pytest.raises(ValueError, match="num_key_value_heads.*must divide num_attention_heads"):
        load_config(path)


@pytest.mark.parametrize("fields, match", [
    ({"dtype": "nonsense"}, "dtype.*nonsense"),
    ({"torch_dtype": "int8"}, "torch_dtype.*int8"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}},
     "rope_scaling.*'yarn'"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}, "rope_parameters.*'dynamic'"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0}}, "rope_parameters.factor"),
    ({"rope_scaling": "yarn"}, "rope_scaling must be an object"),
    ({"use_sliding_window": True, "sliding_window": 16}, "use_sliding_window"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false.*'false'"),
    ({"attention_bias": 1}, "attention_bias must be true or false"),
    ({"eos_token_id": "2"}, "eos_token_id must be a token id"),
    ({"bos_token_id": [1, None]}, "bos_token_id must be a token id"),
    ({"rope_theta": None}, "rope_theta must be a positive number, got None"),
    ({"rope_theta": 0}, "rope_theta must be a positive number"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": "1e6"}}, "rope_parameters.rope_theta"),
])
def test_unsupported_settings_are_refused(checkpoint, tmp_path, fields, match):
    path = edited_config(checkpoint, tmp_path, **fields)
    with pytest.raises(ValueError, match=match) as err:
        load_config(path)
    assert "config.json" in str(err.value)


@pytest.mark.parametrize("fields", [
    {"hidden_act": "silu"}, {"rope_scaling": None}, {"rope_scaling": {"rope_type": "default"}},
    {"dtype": "bfloat16"}, {"use_sliding_window": False, "sliding_window": None},
])
def test_default_settings_are_accepted(checkpoint, tmp_path, fields):
    path = edited_config(checkpoint, tmp_path, **fields)
    assert load_config(path).hidden_act == "silu"


def test_absent_optional_fields_are_accepted(checkpoint, tmp_path):
    data = json.loads((checkpoint / "config.json").read_text())
    for field in ("hidden_act", "rope_scaling", "dtype", "torch_dtype", "use_sliding_window"):
        data.pop(field, None)
    load_qwen3(with_config(checkpoint, tmp_path, json.dumps(data)))


# -- tensors against the config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, tensor", [
    ("intermediate_size", 96, "model.layers.0.mlp.(gate|down)_proj.weight"),
    ("num_key_value_heads", 1, r"model\.layers\.0\.self_attn\.k_proj\.weight"),
    ("vocab_size", 500, r"model\.embed_tokens\.weight"),
])
def test_checkpoint_larger_than_config_is_refused(checkpoint, tmp_path, field, value, tensor):
    path = edited_config(checkpoint, tmp_path, **{field: value})
    config = load_config(path)
    with pytest.raises(ValueError, match=rf"'{tensor}'.*shape mismatch, found \(\d+, \d+\).*implies \(\d+, \d+\)"):
        load_weights(Qwen3ForCausalLM(config), path)


def test_integer_tensor_is_refused(checkpoint, tmp_path):
    tensors = load_file(str(checkpoint / "model.safetensors"))
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.int32)
    (tmp_path / "config.json").write_text((checkpoint / "config.json").read_text())
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"'model\.norm\.weight'.*I32.*floating point"):
        load_weights(Qwen3ForCausalLM(load_config(tmp_path)), tmp_path)


def test_every_tensor_of_both_tiny_variants_is_known(tmp_path):
    """The shape table covers tied and untied heads, attention biases and a head_dim apart from hidden/heads."""
    path = make_tiny_checkpoint(tmp_path, seed=2, tie_word_embeddings=False, attention_bias=True, head_dim=24)
    load_qwen3(path)


def test_sharded_loading_still_works(checkpoint):
    """Tensor-parallel loaders slice a shard after the whole tensor's shape was checked."""
    from nanoserve.parallel.group import TPGroup
    from nanoserve.parallel.layers import ShardedLayers

    config = load_config(checkpoint)
    full = load_qwen3(checkpoint)
    for rank in range(2):
        group = TPGroup(rank, 2, process_group="placeholder: loading runs no collective")
        shard = Qwen3ForCausalLM(config, ShardedLayers(group))
        load_weights(shard, checkpoint)
        want = full.model.layers[0].mlp.down_proj.weight[:, rank * 64:(rank + 1) * 64]
        assert torch.equal(shard.model.layers[0].mlp.down_proj.weight, want)


# -- first contact: a hub id that cannot be fetched, a checkpoint without tokenizer ------------------------------
def offline_hub(monkeypatch, tmp_path, offline: bool):
    import huggingface_hub.constants as hc

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)  # never touch the network, whatever the environment says
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.mark.parametrize("offline", [False, True])
def test_unfetchable_hub_id_is_one_short_error(monkeypatch, tmp_path, offline):
    offline_hub(monkeypatch, tmp_path, offline)
    with pytest.raises(ValueError) as err:
        resolve_model_path("Qwen/Qwen3-0.6B")
    message = str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__  # raise ... from None
    assert "make_tiny_checkpoint" in message and "QWEN3_0_6B_CONFIG" in message
    assert "local directory" in message
    assert ("HF_HUB_OFFLINE" in message) == offline
    assert len(message) < 800


def test_missing_tokenizer_names_both_ways_out(tmp_path):
    from nanoserve import LLM

    path = make_tiny_checkpoint(tmp_path, num_hidden_layers=1)
    with pytest.raises(ValueError) as err:
        LLM(str(path))
    assert "with_tokenizer=True" in str(err.value) and "skip_tokenizer_init=True" in str(err.value)


def test_tiny_config_round_trip_is_valid():
    assert tiny_qwen3_config().num_key_value_heads == 2
