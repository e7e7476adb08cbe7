"""LLM.chat renders the checkpoint's own chat template; the built-in Qwen3 one only fills in for Qwen3 without one."""
import json

import pytest

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.tokenizer import QWEN3_CHAT_TEMPLATE

LLAMA3_TEMPLATE = (
    "{{- bos_token if bos_token else '' }}"
    "{%- for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}")
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "}]
LLAMA3_PROMPT = ("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                 "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    """tokenizer.json and tokenizer_config.json, made once (building the Qwen vocabulary takes seconds)."""
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("tok"), family="llama", with_tokenizer=True,
                                num_hidden_layers=1)
    return path


def checkpoint_with(src, dst, template_in: str | None, template: str = LLAMA3_TEMPLATE):
    """A copy of `src` whose chat template sits in tokenizer_config.json, chat_template.jinja, or nowhere."""
    dst.mkdir(exist_ok=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    config = json.loads((src / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    if template_in == "config":
        config["chat_template"] = template
    elif template_in == "jinja":
        (dst / "chat_template.jinja").write_text(template)
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


def chat_prompt(path, model_type=None) -> str:
    if model_type:
        config = json.loads((path / "config.json").read_text())
        config["model_type"] = model_type
        (path / "config.json").write_text(json.dumps(config))
    llm = LLM(path, num_kv_blocks=32, block_size=8)
    return llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)[0].prompt


@pytest.mark.parametrize("where", ["config", "jinja"])
def test_chat_uses_the_checkpoints_own_template(tokenizer_files, tmp_path, where):
    assert chat_prompt(checkpoint_with(tokenizer_files, tmp_path / where, where)) == LLAMA3_PROMPT


def test_own_template_wins_over_the_builtin_one_for_qwen3_too(tokenizer_files, tmp_path):
    path = checkpoint_with(tokenizer_files, tmp_path / "q", "config")
    make_tiny_checkpoint(path, family="qwen3", vocab_size=151936, num_hidden_layers=1)  # same files, a Qwen3 model
    assert chat_prompt(path) == LLAMA3_PROMPT


def test_qwen3_without_a_template_falls_back_to_the_builtin_one(tokenizer_files, tmp_path):
    path = checkpoint_with(tokenizer_files, tmp_path / "q", None)
    make_tiny_checkpoint(path, family="qwen3", vocab_size=151936, num_hidden_layers=1)
    prompt = chat_prompt(path)
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert LLM(path, num_kv_blocks=8).get_tokenizer().chat_template == QWEN3_CHAT_TEMPLATE


def test_other_families_without_a_template_get_no_qwen_template(tokenizer_files, tmp_path):
    path = checkpoint_with(tokenizer_files, tmp_path / "l", None)
    with pytest.raises(ValueError, match="chat_template"):
        chat_prompt(path)


def test_a_template_that_writes_the_bos_gets_one_bos(tokenizer_files, tmp_path):
    """A tokenizer that adds a BOS when encoding, and a template that writes one too: the chat prompt holds one BOS,
    as transformers' apply_chat_template(tokenize=True) and vLLM give it."""
    from transformers import PreTrainedTokenizerFast

    path = checkpoint_with(tokenizer_files, tmp_path / "bos", "config")
    bos, bos_id = "<|endoftext|>", 151643
    tok = json.loads((path / "tokenizer.json").read_text())
    tok["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos, "type_id": 0}},
                                                                      {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}],
                             "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}}
    (path / "tokenizer.json").write_text(json.dumps(tok))
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, "bos_token": bos}))
    reference = PreTrainedTokenizerFast.from_pretrained(str(path))
    assert reference.encode("Hi")[0] == bos_id  # this tokenizer does add a BOS
    expected = reference.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True, return_dict=False)
    llm = LLM(path, num_kv_blocks=32, block_size=8)
    ids = llm.chat(CHAT, SamplingParams(temperature=0, max_tokens=1), use_tqdm=False)[0].prompt_token_ids
    assert ids == list(expected) and ids[:2] == [bos_id, ids[1]] and ids[1] != bos_id
