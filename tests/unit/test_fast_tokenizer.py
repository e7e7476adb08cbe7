"""FastTokenizer (appendix A1) against transformers' tokenizer of the same folder, and the start that skips transformers."""
import json
import pickle
import shutil
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from nanoserve.tokenizer import QWEN3_CHAT_TEMPLATE, FastTokenizer, build_qwen3_tokenizer, load_tokenizer

SPECIAL_TEXTS = ["<|im_start|>user\nhi<|im_end|>", "<think>\nx\n</think>\n\nok", "<|endoftext|>tail", "<tool_call>"]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tok"))


@pytest.fixture(scope="module")
def pair(qwen3_dir):
    return load_tokenizer(qwen3_dir), PreTrainedTokenizerFast.from_pretrained(str(qwen3_dir))


def test_a_folder_loads_as_a_fast_tokenizer(qwen3_dir, pair):
    fast, reference = load_tokenizer(qwen3_dir), pair[1]
    assert isinstance(fast, FastTokenizer)
    assert len(fast) == len(reference) and fast.get_vocab() == reference.get_vocab()
    assert (fast.eos_token, fast.eos_token_id, fast.bos_token_id) == (reference.eos_token, reference.eos_token_id,
                                                                      reference.bos_token_id)
    assert {i: (t.content, t.special) for i, t in fast.added_tokens_decoder.items()} == \
        {i: (t.content, t.special) for i, t in reference.added_tokens_decoder.items()}
    pieces = fast.convert_ids_to_tokens([9707, 11, 1879, 151645])
    assert pieces == reference.convert_ids_to_tokens([9707, 11, 1879, 151645])
    assert fast.convert_tokens_to_string(pieces) == reference.convert_tokens_to_string(pieces)
    assert fast._transformers is None  # none of this loaded transformers' tokenizer


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(max_size=60), st.sampled_from(SPECIAL_TEXTS)), special=st.booleans())
def test_encode_and_decode_match_transformers(pair, text, special):
    fast, reference = pair
    ids = fast.encode(text, add_special_tokens=special)
    assert ids == reference.encode(text, add_special_tokens=special)
    assert fast.decode(ids, skip_special_tokens=special) == reference.decode(ids, skip_special_tokens=special)


def test_decode_takes_what_transformers_takes(pair):
    import numpy as np
    import torch

    fast, reference = pair
    for ids in (9707, [9707, 11], (9707, 11), torch.tensor([9707, 11]), torch.tensor(9707), np.int64(9707),
                list(np.array([9707, 11])), [[9707, 11], [11]], {"input_ids": [9707, 11]}):
        assert fast.decode(ids) == reference.decode(ids)
    assert fast.convert_ids_to_tokens(9707) == reference.convert_ids_to_tokens(9707)
    assert fast.encode("a", "b") == reference.encode("a", "b")  # a text pair


def test_after_a_write_transformers_answers_every_call(qwen3_dir):
    fast, reference = load_tokenizer(qwen3_dir), PreTrainedTokenizerFast.from_pretrained(str(qwen3_dir))
    for tok in (fast, reference):
        tok.padding_side = "left"
        tok.add_tokens(["<|newtok|>"], special_tokens=True)
        tok.eos_token = "<|endoftext|>"
    assert fast(["hi", "hello there friend"], padding=True)["input_ids"] == \
        reference(["hi", "hello there friend"], padding=True)["input_ids"]
    ids = fast.encode("a <|newtok|> b")
    assert ids == reference.encode("a <|newtok|> b") and len(fast) == len(reference)
    assert fast.decode(ids, skip_special_tokens=True) == reference.decode(ids, skip_special_tokens=True)
    assert (fast.eos_token, fast.eos_token_id) == (reference.eos_token, reference.eos_token_id)


def test_concurrent_first_use_loads_transformers_once(qwen3_dir):
    fast, loaded = load_tokenizer(qwen3_dir), []
    threads = [threading.Thread(target=lambda: loaded.append(fast.load_transformers())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(loaded) == 4 and all(t is loaded[0] for t in loaded)


def test_encode_lets_other_threads_run(pair):
    """A server tokenizes on threads beside the engine's: encode must not hold the interpreter lock throughout."""
    fast = pair[0]
    text = " ".join(f"word{i} café 你好 {i * 7919}" for i in range(6000))
    start = time.perf_counter()
    fast.encode(text)
    alone = time.perf_counter() - start
    assert alone > 0.03, "the text is too short to tell"
    worker = threading.Thread(target=fast.encode, args=(text,))
    last, longest = time.perf_counter(), 0.0
    worker.start()
    while worker.is_alive():  # this thread's longest wait for the lock while the other one encodes
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    worker.join()
    assert longest < alone / 2, (longest, alone)


def test_chat_template_renders_as_transformers_does(pair):
    fast, reference = pair
    reference.chat_template = QWEN3_CHAT_TEMPLATE
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "<think>\nx\n</think>\n\nhello"}, {"role": "user", "content": "again"}]
    for kwargs in ({"add_generation_prompt": True}, {"add_generation_prompt": True, "enable_thinking": False},
                   {"continue_final_message": True}):
        assert fast.apply_chat_template(chat, tokenize=False, **kwargs) == \
            reference.apply_chat_template(chat, tokenize=False, **kwargs)
    assert fast.apply_chat_template(chat, tokenize=True) == reference.apply_chat_template(chat, tokenize=True)


def test_a_new_chat_template_reaches_transformers_and_survives_pickling(pair):
    fast = pickle.loads(pickle.dumps(pair[0]))
    fast.chat_template = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}"
    assert fast.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "[user] hi"
    copy = pickle.loads(pickle.dumps(fast))  # the server's template process gets such a copy
    assert copy.chat_template == fast.chat_template and copy.encode("hi there") == fast.encode("hi there")
    assert copy.load_transformers().apply_chat_template([{"role": "user", "content": "x"}], tokenize=False) == "[user] x"


def test_template_files_are_chosen_as_transformers_chooses(qwen3_dir, tmp_path):
    shutil.copy(qwen3_dir / "tokenizer.json", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "CONFIG"}))
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0].content | upper }}")
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "tool_use.jinja").write_text("TOOLS")
    fast, reference = load_tokenizer(tmp_path), PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert isinstance(fast, FastTokenizer)
    chat, tools = [{"role": "user", "content": "hi"}], [{"type": "function", "function": {"name": "f"}}]
    for kwargs in ({}, {"tools": tools}):
        assert fast.apply_chat_template(chat, tokenize=False, **kwargs) == \
            reference.apply_chat_template(chat, tokenize=False, **kwargs)


@pytest.mark.parametrize("extra", [{"additional_special_tokens": ["<|newtok|>"]}, {"mask_token": "<mask>"},
                                   {"pad_token": "!!"}])  # "!!" is a BPE token, not an added one
def test_named_tokens_tokenizer_json_lacks_load_transformers(qwen3_dir, tmp_path, extra):
    shutil.copy(qwen3_dir / "tokenizer.json", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", **extra}))
    assert not isinstance(load_tokenizer(tmp_path), FastTokenizer)


def test_a_legacy_special_tokens_map_loads_transformers(qwen3_dir, tmp_path):
    shutil.copy(qwen3_dir / "tokenizer.json", tmp_path)
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    tok = load_tokenizer(tmp_path)
    assert not isinstance(tok, FastTokenizer) and tok.eos_token_id == 151645


@pytest.mark.parametrize("flag", ["add_bos_token", "add_eos_token", "clean_up_tokenization_spaces"])
def test_config_rules_only_transformers_applies_load_transformers(qwen3_dir, tmp_path, flag):
    shutil.copy(qwen3_dir / "tokenizer.json", tmp_path)
    config = {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", flag: True}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tok = load_tokenizer(tmp_path)
    assert not isinstance(tok, FastTokenizer)
    assert tok.encode("hi") == PreTrainedTokenizerFast.from_pretrained(str(tmp_path)).encode("hi")


def test_smollm2_folder_matches_transformers(tmp_path):
    from course.real_model import smollm2_gguf

    gguf = smollm2_gguf(quiet=True)
    if gguf is None:
        pytest.skip("SmolLM2-135M-Instruct's GGUF is not available offline")
    PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(tmp_path)
    fast, reference = load_tokenizer(tmp_path), PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert isinstance(fast, FastTokenizer) and (fast.bos_token_id, fast.eos_token_id) == (1, 2)
    for text in ["Hello, world!", "naïve café 你好 🙂", *SPECIAL_TEXTS]:
        for special in (True, False):
            ids = fast.encode(text, add_special_tokens=special)
            assert ids == reference.encode(text, add_special_tokens=special)
            assert fast.decode(ids, skip_special_tokens=special) == reference.decode(ids, skip_special_tokens=special)
    chat = [{"role": "user", "content": "What is 2+2?"}]
    assert fast.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
        reference.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def test_an_engine_start_and_generate_never_import_transformers(tmp_path):
    from nanoserve.model.tiny import make_tiny_checkpoint

    make_tiny_checkpoint(tmp_path, with_tokenizer=True)
    code = (f"import sys\nfrom nanoserve import LLM, SamplingParams\nllm = LLM({str(tmp_path)!r}, enforce_eager=True)\n"
            "llm.generate(['Hello there'], SamplingParams(max_tokens=3, temperature=0))\n"
            "print('after generate', 'transformers' in sys.modules)\n"
            "llm.chat([{'role': 'user', 'content': 'hi'}], SamplingParams(max_tokens=2, temperature=0))\n"
            "print('after chat', 'transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "after generate False" in out.stdout and "after chat True" in out.stdout
