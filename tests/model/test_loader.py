"""Weight loading: every parameter exactly once, clear errors otherwise; model path resolution."""
import pytest
import torch
from safetensors.torch import load_file, save_file

from nanoserve.model.loader import load_config, load_weights, resolve_model_path
from nanoserve.model.qwen3 import Qwen3ForCausalLM
from nanoserve.model.tiny import make_tiny_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"))


def rewrite(checkpoint, tmp_path, edit):
    """Copy the checkpoint with its tensor dict edited by `edit`."""
    tensors = load_file(str(checkpoint / "model.safetensors"))
    edit(tensors)
    (tmp_path / "config.json").write_text((checkpoint / "config.json").read_text())
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def fresh_model(path):
    return Qwen3ForCausalLM(load_config(path))


def test_every_parameter_is_loaded(checkpoint):
    model = fresh_model(checkpoint)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    load_weights(model, checkpoint)
    assert all(not p.isnan().any() for p in model.parameters())
    ref = load_file(str(checkpoint / "model.safetensors"))
    qkv = model.model.layers[1].self_attn.qkv_proj.weight
    want = torch.cat([ref[f"model.layers.1.self_attn.{n}_proj.weight"] for n in "qkv"])
    torch.testing.assert_close(qkv, want)


def test_missing_tensor_is_named(checkpoint, tmp_path):
    path = rewrite(checkpoint, tmp_path, lambda t: t.pop("model.layers.0.self_attn.k_proj.weight"))
    with pytest.raises(ValueError, match=r"model\.layers\.0\.self_attn\.qkv_proj\.weight\[k\]"):
        load_weights(fresh_model(path), path)


def test_unexpected_tensor_is_named(checkpoint, tmp_path):
    path = rewrite(checkpoint, tmp_path, lambda t: t.update({"model.layers.0.mlp.extra.weight": torch.zeros(2)}))
    with pytest.raises(ValueError, match=r"unexpected tensor 'model\.layers\.0\.mlp\.extra\.weight'"):
        load_weights(fresh_model(path), path)


def test_duplicate_tensor_across_files(checkpoint, tmp_path):
    path = rewrite(checkpoint, tmp_path, lambda t: None)
    save_file({"model.norm.weight": torch.ones(64)}, str(tmp_path / "model-extra.safetensors"))
    with pytest.raises(ValueError, match=r"'model\.norm\.weight' appears twice"):
        load_weights(fresh_model(path), path)


def test_wrong_shape_is_named(checkpoint, tmp_path):
    path = rewrite(checkpoint, tmp_path, lambda t: t.update({"model.norm.weight": torch.ones(3)}))
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*shape mismatch"):
        load_weights(fresh_model(path), path)


def test_existing_directory_is_returned(checkpoint):
    assert resolve_model_path(checkpoint) == checkpoint
    assert resolve_model_path(str(checkpoint)) == checkpoint


def test_missing_model_offline_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hc
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="local directory") as err:
        resolve_model_path(tmp_path / "no-such-model")
    assert "config.json" in str(err.value) and "hub" in str(err.value)
    with pytest.raises(ValueError, match="hub"):
        resolve_model_path("nobody/not-a-real-model")


def test_bad_model_argument_type():
    with pytest.raises(TypeError):
        resolve_model_path(3)
