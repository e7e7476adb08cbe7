"""What a newcomer meets first: the bench command line, latency from one call, where results go, set-up files."""
import importlib.util
import json
import re
import time
from pathlib import Path

import pytest

import nanobench.cli as bench
from nanobench.engine_base import BenchEngine
from nanobench.measure import measure_latency, timed_first_token_run
from nanobench.workloads import latency_requests

REPO = Path(__file__).resolve().parents[2]


# ---- latency: TTFT and TPOT from one call -----------------------------------------------------
class SteppingEngine(BenchEngine):
    """A stand-in engine whose generate calls step() once per token, slowly on the first (the prefill)."""

    name = "stepping"

    def __init__(self, prefill_s=0.02, decode_s=0.001, extra_steps=0):
        self.prefill_s, self.decode_s, self.extra_steps, self.calls = prefill_s, decode_s, extra_steps, 0
        super().__init__("model", {})

    def _build(self):
        self.llm = self

    def step(self):
        time.sleep(self.prefill_s if self.steps_done == 0 else self.decode_s)
        self.steps_done += 1

    def prepare(self, requests, temperature):
        return list(requests)

    def run(self, prepared):
        self.calls += 1
        self.steps_done = 0
        longest = max(r.max_tokens for r in prepared)
        for _ in range(longest + self.extra_steps):
            self.step()
        return [r.max_tokens for r in prepared]

    def step_owner(self):
        return self


def test_the_first_token_is_timed_by_counting_steps_within_one_call():
    engine = SteppingEngine(prefill_s=0.05, decode_s=0.002)
    first, wall, counts = timed_first_token_run(engine, latency_requests(2, 8, 8), 0.0)
    assert counts == [8, 8] and engine.calls == 1
    assert 0.05 <= first < wall and wall - first < 0.05  # the prefill step is the first token
    assert "step" not in vars(engine)  # the counting wrapper is gone afterwards


def test_latency_makes_one_call_per_repetition_and_tpot_is_never_negative():
    engine = SteppingEngine(prefill_s=0.01, decode_s=0.0)
    m = measure_latency(engine, batch_sizes=(1, 2), length=4, reps=3)
    assert engine.calls == 2 * (3 + 1)
    for b in m["batches"].values():
        assert all(t >= 0 for t in b["tpot_ms_runs"]) and all(t >= 0 for t in b["ttft_ms_runs"])
        assert all(f <= w for f, w in zip(b["ttft_ms_runs"], b["total_ms_runs"]))
    assert "one max_tokens call" in m["method"]


def test_a_first_token_reported_after_the_call_ends_is_clamped():
    class LateClock(SteppingEngine):
        def run_timed(self, prepared):
            return self.run(prepared), time.perf_counter() + 10.0  # an engine clock running ahead

    m = measure_latency(LateClock(prefill_s=0.0, decode_s=0.0), batch_sizes=(1,), length=3, reps=2)
    assert all(t == 0.0 for t in m["batches"]["1"]["tpot_ms_runs"])


def test_too_few_steps_to_time_the_first_token_is_an_error():
    class Batched(SteppingEngine):
        def run(self, prepared):  # all tokens in a single step: no way to tell the first one apart
            self.calls += 1
            self.steps_done = 0
            self.step()
            return [r.max_tokens for r in prepared]

    with pytest.raises(RuntimeError, match="cannot time the first token"):
        timed_first_token_run(Batched(), latency_requests(1, 4, 4), 0.0)


def test_nanoserve_latency_comes_from_its_own_first_token_times(tmp_path):
    pytest.importorskip("nanoserve.llm")
    from nanobench.engines import NanoserveEngine
    from nanoserve.model.tiny import make_tiny_checkpoint

    engine = NanoserveEngine(make_tiny_checkpoint(tmp_path / "m"), {"device": "cpu", "max_model_len": 64,
                                                                     "skip_tokenizer_init": True})
    try:
        m = measure_latency(engine, batch_sizes=(1, 3), length=6, reps=2, max_token_id=500)
    finally:
        engine.close()
    for b in m["batches"].values():
        assert all(0 < f <= w for f, w in zip(b["ttft_ms_runs"], b["total_ms_runs"]))
        assert all(t >= 0 for t in b["tpot_ms_runs"])


# ---- the command line ---------------------------------------------------------------------------
def test_help_lists_every_subcommand_and_each_has_its_own_help(capsys):
    with pytest.raises(SystemExit) as done:
        bench.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    listed = re.findall(r"^  (\S+) +\S", text.split("subcommands (")[1], flags=re.M)
    assert listed == list(bench.SUBCOMMANDS) and "serve" in listed and "--model" in text
    for name in bench.SUBCOMMANDS:
        with pytest.raises(SystemExit) as done:
            bench.main([name, "-h"])
        assert done.value.code == 0, name
        assert f"nanobench {name}" in capsys.readouterr().out


def test_runs_go_to_a_git_ignored_folder_by_default():
    args = bench.parse_run_args(["--engine", "nanoserve", "--workload", "random", "--model", "m"])
    assert args.out == bench.DEFAULT_RESULTS_DIR == "benchmarks/runs"
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert f"/{bench.DEFAULT_RESULTS_DIR}/" in ignored


def test_a_model_that_cannot_be_found_is_one_error_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = bench.main(["--engine", "nanoserve", "--workload", "random", "--model", str(tmp_path / "no-such-model"),
                     "--device", "cpu", "--num-requests", "2", "--output-len", "2,4", "--prompt-len", "4,8",
                     "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("python -m nanobench: error: ") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_build_model_knows_the_packaged_qwen3_config(capsys):
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG

    assert bench.main(["build-model", "--config", "qwen3-0.6b", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out) == QWEN3_0_6B_CONFIG
    with pytest.raises(SystemExit) as done:
        bench.main(["build-model", "--config", "no-such.json", "--out", "x"])
    assert done.value.code == 2 and "qwen3-0.6b" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["build-model", "--config", "qwen3-0.6b"])  # --out missing
    assert "--out DIR is required" in capsys.readouterr().err


def test_build_model_from_a_config_file_prints_an_absolute_path(tmp_path, capsys):
    from nanoserve.model.tiny import tiny_qwen3_config

    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_qwen3_config().to_dict()))
    assert bench.main(["build-model", "--config", str(config), "--out", str(tmp_path / "ckpt"), "--no-tokenizer"]) == 0
    printed = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed.is_absolute() and (printed / "config.json").is_file()


# ---- set-up files -------------------------------------------------------------------------------
def test_environment_yml_pins_the_same_cpu_torch_as_the_set_up_script():
    pin = re.search(r"^(torch==\S+\+cpu)", (REPO / "constraints-cpu.txt").read_text(), flags=re.M).group(1)
    env = (REPO / "environment.yml").read_text()
    assert f"- {pin}\n" in env and "--extra-index-url https://download.pytorch.org/whl/cpu" in env


def test_the_serve_and_course_extras_hold_the_server_packages():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in ("serve", "course", "dev"):
        assert {"fastapi", "uvicorn", "httpx", "openai"} <= set(extras[name]), name


def _run_course_module():
    spec = importlib.util.spec_from_file_location("run_course", REPO / "scripts" / "run_course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_course_stamp_changes_with_any_chapter_input(tmp_path, monkeypatch):
    rc = _run_course_module()
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "00_x.ipynb").write_text("{}")
    (tmp_path / "chapters" / "__pycache__").mkdir()
    monkeypatch.setattr(rc, "REPO", tmp_path)
    monkeypatch.setattr(rc, "HASHED", ("chapters", "pyproject.toml"))
    first = rc.inputs_hash()
    (tmp_path / "chapters" / "__pycache__" / "x.pyc").write_bytes(b"\0")  # caches do not count
    assert rc.inputs_hash() == first
    (tmp_path / "chapters" / "00_x.ipynb").write_text('{"cells": []}')
    second = rc.inputs_hash()
    assert second != first
    (tmp_path / "pyproject.toml").write_text("")
    assert rc.inputs_hash() not in (first, second)
    assert rc.stamp_path(first).name == f".nanoserve-course-ok-{first}"
