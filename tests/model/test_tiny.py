"""Checkpoint factories: tiny configs, tokenizer-bearing checkpoints, checkpoints from a config.json."""
import json

import torch
from transformers import AutoTokenizer

from nanoserve.model.loader import load_qwen3, resolve_model_path
from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config, make_tiny_checkpoint, tiny_qwen3_config
from nanoserve.tokenizer import load_tokenizer


def test_tiny_config_defaults_and_overrides():
    c = tiny_qwen3_config(num_hidden_layers=3)
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.head_dim, c.num_key_value_heads) == (512, 64, 3, 16, 2)
    assert c.tie_word_embeddings and c.rope_parameters["rope_theta"] == 10000.0


def test_same_seed_same_weights_and_caller_rng_untouched(tmp_path):
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = make_tiny_checkpoint(tmp_path / "a", seed=5)
    assert torch.equal(torch.rand(1), expected_next)
    b = make_tiny_checkpoint(tmp_path / "b", seed=5)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_checkpoint_with_tokenizer(tmp_path):
    path = make_tiny_checkpoint(tmp_path / "tok", with_tokenizer=True, num_hidden_layers=1)
    assert json.loads((path / "config.json").read_text())["vocab_size"] == 151936
    tok = load_tokenizer(path)
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert AutoTokenizer.from_pretrained(str(path)).eos_token_id == 151645
    model = load_qwen3(resolve_model_path(path))
    ids = torch.tensor(tok.encode("Hello"))
    assert model.compute_logits(model(ids, torch.arange(len(ids)))).shape == (len(ids), 151936)


def test_checkpoint_from_config_keeps_shapes(tmp_path):
    small = dict(QWEN3_0_6B_CONFIG, num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=8, vocab_size=300)
    (tmp_path / "config.json").write_text(json.dumps(small))
    out = make_checkpoint_from_config(tmp_path / "config.json", tmp_path / "ckpt", with_tokenizer=False)
    model = load_qwen3(out)
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    assert model.model.layers[0].self_attn.qkv_proj.weight.shape == (2 * 8 + 2 * 8, 32)
