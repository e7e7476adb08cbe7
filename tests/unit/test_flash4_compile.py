"""A machine's first start with flash-attn-4 (chapter 19's marker, appendix A5's background compile), on a CPU: what
'auto' picks before and after the compile, the job the compile process gets, and one compile at a time."""
import dataclasses
import fcntl
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from nanoserve.attention import flash, flash4
from nanoserve.engine import flash4_compile
from nanoserve.engine.selector import attention_backends


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """An empty kernel cache folder, and flash-attn-4 '4.0.0' on a compute capability 9.0 GPU as far as the marker
    knows."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(flash4.importlib.metadata, "version", lambda name: "4.0.0")
    monkeypatch.setattr(flash4.torch.cuda, "get_device_capability", lambda *a: (9, 0))
    return flash4.kernel_cache_dir()


def geometry(heads=16, kv_heads=8, dim=128):
    return SimpleNamespace(num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=dim, hidden_size=1024)


@pytest.mark.parametrize("flash2", [True, False])
def test_auto_takes_flash4_once_its_kernels_are_compiled(monkeypatch, cache, flash2):
    monkeypatch.setattr(flash4, "flash4_available", lambda: True)
    monkeypatch.setattr(flash, "flash_attn_available", lambda: flash2)
    model = geometry()
    assert next(iter(attention_backends(model))) == ("flash" if flash2 else "flash4")  # nothing compiled yet
    assert next(iter(attention_backends())) == "flash4"  # no model: the pick once kernels are compiled
    flash4.compiled_marker(model).parent.mkdir(parents=True)
    flash4.compiled_marker(model).write_text("{}")
    assert next(iter(attention_backends(model))) == "flash4"
    assert next(iter(attention_backends(geometry(dim=64)))) == ("flash" if flash2 else "flash4")  # another geometry


def test_the_marker_is_per_library_versions_gpu_and_geometry(monkeypatch, cache):
    markers = {flash4.compiled_marker(geometry()), flash4.compiled_marker(geometry(kv_heads=4)),
               flash4.compiled_marker(geometry(dim=64))}
    monkeypatch.setattr(flash4.torch.cuda, "get_device_capability", lambda *a: (10, 0))
    markers.add(flash4.compiled_marker(geometry()))
    monkeypatch.setattr(flash4.importlib.metadata, "version", lambda name: "4.0.1")
    markers.add(flash4.compiled_marker(geometry()))
    # an image update that bumps only the CUTLASS DSL or tvm-ffi empties flash-attn-4's own cache: the marker goes too
    for bumped in ("nvidia-cutlass-dsl-libs-base", "apache-tvm-ffi"):
        monkeypatch.setattr(flash4.importlib.metadata, "version", lambda name, b=bumped: "9.9" if name == b else "4.0.1")
        markers.add(flash4.compiled_marker(geometry()))
    assert len(markers) == 7 and all(m.parent == cache / "compiled" for m in markers)


def test_the_marker_survives_a_missing_dependency_distribution(monkeypatch, cache):
    """A --no-deps install may lack a distribution's metadata: the marker is still a path, `auto` still answers."""
    def version(name):
        if name != "flash-attn-4":
            raise flash4.importlib.metadata.PackageNotFoundError(name)
        return "4.0.0"

    monkeypatch.setattr(flash4.importlib.metadata, "version", version)
    assert flash4.compiled_marker(geometry()).parent == cache / "compiled"
    assert not flash4.flash4_compiled(geometry())


def tiny_engine_config(tmp_path, **options):
    from nanoserve.engine.config import EngineConfig
    from nanoserve.model.loader import load_config
    from nanoserve.model.tiny import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "m", max_position_embeddings=256)
    model_config = load_config(path)
    config = EngineConfig(str(path), device="cpu", block_size=16, max_model_len=200, max_num_seqs=4,
                          skip_tokenizer_init=True, **options).resolve(model_config)
    return config, model_config


def test_the_job_rebuilds_the_engine_shapes_with_one_dummy_layer(tmp_path):
    """The job is JSON; the core it builds (torch attention here: a CPU cannot run flash4) has the engine's settings,
    the model's attention geometry, one layer of random weights, and runs a step."""
    from nanoserve.engine.sequence import Sequence
    from nanoserve.sampling import SamplingParams

    config, model_config = tiny_engine_config(tmp_path, speculative_config={"num_speculative_tokens": 2})
    job = json.loads(json.dumps(flash4_compile.compile_job(config)))
    assert job["speculative_config"]["num_speculative_tokens"] == 2 and job["dtype"] == "float32"
    core = flash4_compile.compile_core(job, backend="torch")
    runner = core.executor
    assert runner.config.max_num_seqs == 4 and runner.config.load_format == "dummy" and core.num_kv_blocks == 14
    assert runner.model_config.num_hidden_layers == 1 and len(runner.kv_caches) == 1
    assert (runner.model_config.num_attention_heads, runner.model_config.num_key_value_heads) == (
        model_config.num_attention_heads, model_config.num_key_value_heads)
    assert all(p.abs().max() <= 1e-3 for p in runner.model.parameters())  # vLLM's dummy weights
    core.add([Sequence(0, [1, 2, 3], max_tokens=2, params=SamplingParams(temperature=0))])
    while core.has_unfinished():
        core.step()


def test_a_cpu_engine_starts_no_compile(tmp_path):
    from nanoserve import LLM
    from nanoserve.model.tiny import make_tiny_checkpoint

    llm = LLM(str(make_tiny_checkpoint(tmp_path / "m")), device="cpu", skip_tokenizer_init=True)
    assert llm.engine.kernel_compile is None and llm.engine.config.flash4_compile == "background"
    with pytest.raises(ValueError, match="flash4_compile.*background.*startup"):
        LLM(str(tmp_path / "m"), device="cpu", skip_tokenizer_init=True, flash4_compile="later")


def test_the_compile_process_is_detached_and_started_once(monkeypatch, cache, tmp_path):
    config, model_config = tiny_engine_config(tmp_path)
    started = []
    process = SimpleNamespace(pid=123)
    monkeypatch.setattr(subprocess, "Popen", lambda args, **kw: started.append((args, kw)) or process)
    monkeypatch.setattr(flash4_compile, "flash4_available", lambda: True)
    assert flash4_compile.compile_in_background(config, model_config) is None  # a CPU engine
    on_gpu = dataclasses.replace(config, device=torch.device("cuda"))
    on_flash4 = dataclasses.replace(on_gpu, attention_backend="flash4")  # it compiles what it meets itself
    assert flash4_compile.compile_in_background(on_flash4, model_config) is None and not started
    assert flash4_compile.compile_in_background(on_gpu, model_config) is process
    (args, kw), = started
    assert args[:3] == [sys.executable, "-m", "nanoserve.engine.flash4_compile"] and kw["start_new_session"]
    work = json.loads(args[3])
    assert work["job"]["device"] == "cuda" and work["marker"] == str(flash4.compiled_marker(model_config))
    flash4.compiled_marker(model_config).parent.mkdir(parents=True)
    flash4.compiled_marker(model_config).write_text("{}")
    assert flash4_compile.compile_in_background(on_gpu, model_config) is None and len(started) == 1


def test_one_compile_at_a_time_and_a_finished_one_is_kept(monkeypatch, cache, capsys):
    cores = []

    class Core:
        executor = None

        def shutdown(self):
            pass

    monkeypatch.setattr(flash4_compile, "compile_core", lambda job: cores.append(job) or Core())
    monkeypatch.setattr(flash4_compile, "dummy_step", lambda runner: None)
    marker = flash4.compiled_marker(geometry())
    argv = ["flash4_compile", json.dumps({"job": {"model": "m"}, "marker": str(marker)})]
    cache.mkdir(parents=True)
    with open(cache / "compile.lock", "w") as held:  # another process compiles
        fcntl.flock(held, fcntl.LOCK_EX)
        flash4_compile.main(argv)
        assert not cores and "another process" in capsys.readouterr().out
    flash4_compile.main(argv)
    assert cores == [{"model": "m"}] and json.loads(marker.read_text()) == {"model": "m"}
    flash4_compile.main(argv)  # the marker is there: nothing to do
    assert len(cores) == 1
    flash4_compile.wait_for_compile()  # returns at once: nothing holds the lock


def test_an_unwritable_cache_costs_the_compile_not_the_engine(monkeypatch, cache, tmp_path, caplog):
    config, model_config = tiny_engine_config(tmp_path)
    monkeypatch.setattr(flash4_compile, "flash4_available", lambda: True)

    def refuse(*args, **kwargs):
        raise PermissionError("read-only file system")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    on_gpu = dataclasses.replace(config, device=torch.device("cuda"))
    assert flash4_compile.compile_in_background(on_gpu, model_config) is None
    assert "stays on flash-attn 2" in caplog.text
