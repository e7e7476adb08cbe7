"""Damaged checkpoint and tokenizer files raise a ValueError that names the file and what is wrong."""
import json
import shutil
import struct

import pytest
import torch

from nanoserve.model.loader import load_qwen3
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("good"), seed=0, with_tokenizer=True)


def _copy(good, tmp_path):
    out = tmp_path / "ckpt"
    shutil.copytree(good, out)
    return out


def _split(raw: bytes):
    n = struct.unpack("<Q", raw[:8])[0]
    return n, json.loads(raw[8:8 + n]), raw[8 + n:]


def _with_header(header: dict, data: bytes) -> bytes:
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body + data


def _empty(raw):
    return b""


def _truncated_header(raw):
    n, _, _ = _split(raw)
    return raw[:8 + n // 2]


def _bad_json_header(raw):
    n, _, data = _split(raw)
    return raw[:8] + b"{" * n + data


def _missing_data(raw):
    n, _, data = _split(raw)
    return raw[:8 + n + len(data) // 2]


def _wrong_dtype(raw):
    _, header, data = _split(raw)
    name = next(k for k in header if k != "__metadata__")
    header[name] = dict(header[name], dtype="F99")
    return _with_header(header, data)


@pytest.mark.parametrize("damage, says", [
    (_empty, "is empty"), (_truncated_header, "truncated header"), (_bad_json_header, "not valid JSON"),
    (_missing_data, "missing tensor data"), (_wrong_dtype, "dtype 'F99'")])
def test_damaged_safetensors_name_the_file_and_the_damage(good, tmp_path, damage, says):
    ckpt = _copy(good, tmp_path)
    file = ckpt / "model.safetensors"
    file.write_bytes(damage(file.read_bytes()))
    with pytest.raises(ValueError, match=says) as err:
        load_qwen3(ckpt, dtype=torch.float32)
    assert str(file) in str(err.value)


def test_the_undamaged_checkpoint_still_loads(good):
    assert load_qwen3(good, dtype=torch.float32).config.vocab_size > 0


@pytest.mark.parametrize("name, content, says", [
    ("tokenizer.json", '{"version": "1.0", "model": ', "tokenizer.json is not valid JSON"),
    ("tokenizer.json", '{"version": "1.0", "added_tokens": []}', "has no model section"),
    ("tokenizer_config.json", '{"chat_template": ', "tokenizer_config.json is not valid JSON"),
    ("tokenizer_config.json", '["not", "an", "object"]', "tokenizer_config.json must hold a JSON object"),
    ("tokenizer_config.json", '{"chat_template": 7}', "chat_template must be a string")])
def test_damaged_tokenizer_files_name_the_file(good, tmp_path, name, content, says):
    ckpt = _copy(good, tmp_path)
    (ckpt / name).write_text(content)
    with pytest.raises(ValueError, match=says) as err:
        load_tokenizer(ckpt)
    assert str(ckpt / name) in str(err.value)


def test_the_hub_error_names_a_command_that_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError) as err:
        load_qwen3(str(tmp_path / "no-such-model"))
    message = str(err.value)
    command = message.split('python -c "', 1)[1].split('"', 1)[0]
    assert "QWEN3_0_6B_CONFIG" in command and "nanoserve/model/tiny.py" in message
    compile(command, "<hub-error-command>", "exec")  # the quoted Python is valid as printed
