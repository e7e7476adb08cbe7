"""transformers_model: the course's GGUF is read by transformers once, kept as float32 safetensors, then reused."""
import os
import time

import pytest
import torch

import course.real_model as real_model
from nanoserve.model.gguf import write_gguf
from nanoserve.model.tiny import make_tiny_checkpoint


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random Llama checkpoint (plain RoPE, as GGUF files carry it), tied head as SmolLM2's."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny"), family="llama", seed=3, rope_scaling=None)


@pytest.fixture
def course_gguf(tiny_dir, tmp_path, monkeypatch):
    """The tiny model as a GGUF file that passes for the course's (same name, size recorded), with an empty cache."""
    path = write_gguf(tiny_dir, tmp_path / real_model.GGUF_NAME)
    monkeypatch.setattr(real_model, "GGUF_SIZE", path.stat().st_size)
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "cache"))
    return path


@pytest.fixture
def loads(monkeypatch):
    """The folders transformers is asked to load, in order (a GGUF load is recorded as the file's path)."""
    seen, load = [], real_model._load

    def spy(path, **kwargs):
        seen.append(path / kwargs["gguf_file"] if "gguf_file" in kwargs else path)
        return load(path, **kwargs)

    monkeypatch.setattr(real_model, "_load", spy)
    return seen


def same_model(a, b) -> bool:
    """Equal weights (tied head included) and equal logits on a few tokens."""
    ids = torch.tensor([[5, 17, 300, 42]])
    sa, sb = a.state_dict(), b.state_dict()
    with torch.no_grad():
        return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa) and \
            torch.equal(a(ids).logits, b(ids).logits)


def test_first_use_reads_the_gguf_and_keeps_a_copy_that_later_calls_load(course_gguf, loads, capfd):
    first = real_model.transformers_model(course_gguf)
    copy = real_model.fp32_copy_dir()
    assert loads == [course_gguf]
    assert sorted(p.name for p in copy.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    assert "quantization_config" not in (copy / "config.json").read_text()  # an ordinary checkpoint now
    assert [p.name for p in copy.parent.iterdir()] == [copy.name]  # no temporary folder left behind
    again = real_model.transformers_model(course_gguf)
    assert loads == [course_gguf, copy]  # the copy, not the GGUF
    assert same_model(first, again) and not again.training
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()  # still tied
    out, err = capfd.readouterr()
    assert out == "" and "it/s" not in err  # no progress bars


def test_copy_is_named_after_the_files_checksum(course_gguf, monkeypatch):
    before = real_model.fp32_copy_dir()
    monkeypatch.setattr(real_model, "GGUF_SHA256", "another-file-entirely")
    assert real_model.fp32_copy_dir() != before and real_model.fp32_copy_dir().parent == before.parent


def test_a_save_that_dies_midway_leaves_no_copy_and_the_next_call_writes_it(course_gguf, loads, monkeypatch):
    save = real_model._save_plain

    def dies(model, folder):
        (folder / "config.json").write_text("{}")  # half a copy, then the run is interrupted
        raise KeyboardInterrupt

    monkeypatch.setattr(real_model, "_save_plain", dies)
    with pytest.raises(KeyboardInterrupt):
        real_model.transformers_model(course_gguf)
    cache = real_model.fp32_copy_dir().parent
    assert list(cache.iterdir()) == []  # neither a copy nor its temporary folder
    monkeypatch.setattr(real_model, "_save_plain", save)
    real_model.transformers_model(course_gguf)
    real_model.transformers_model(course_gguf)
    assert loads == [course_gguf, course_gguf, real_model.fp32_copy_dir()]


def test_a_killed_runs_folder_is_never_read_and_is_swept_once_stale(course_gguf, loads):
    copy = real_model.fp32_copy_dir()
    copy.parent.mkdir(parents=True)
    stale, live = copy.parent / f".{copy.name}.old.part", copy.parent / f".{copy.name}.new.part"
    for part in (stale, live):
        part.mkdir()
        (part / "config.json").write_text("{}")
    hour_ago = time.time() - 2 * 3600
    os.utime(stale, (hour_ago, hour_ago))
    real_model.transformers_model(course_gguf)
    assert loads == [course_gguf]  # the half copies were not taken for the copy
    assert not stale.exists() and live.exists()  # a live run's folder is left to it


def test_another_runs_copy_wins_the_race_quietly(course_gguf, capsys):
    model = real_model.transformers_model(course_gguf)
    real_model._keep_copy(model, real_model.fp32_copy_dir())  # the rename finds a copy already there
    assert capsys.readouterr().out == ""
    assert [p.name for p in real_model.fp32_copy_dir().parent.iterdir()] == [real_model.fp32_copy_dir().name]


def test_other_models_load_directly_and_cache_nothing(tiny_dir, tmp_path, loads, monkeypatch):
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "cache"))
    other = write_gguf(tiny_dir, tmp_path / "tiny.F32.gguf")  # not the course's file
    assert same_model(real_model.transformers_model(tiny_dir), real_model.transformers_model(other))
    assert loads == [tiny_dir, other] and not (tmp_path / "cache").exists()
