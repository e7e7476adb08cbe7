"""The benchmark harness: workloads, floor, results files, report, bundles, and a tiny end-to-end run."""
import json
import random
import time

import pytest

import nanobench.cli as bench
from nanobench.checks import BenchArgumentError, smoke_model_dir
from nanobench.cli import engine_options, parse_run_args, parse_workloads, run_benchmark, run_parser
from nanobench.floor import H200_DATASHEET, decode_step_floor_s, model_cost, workload_floor
from nanobench.measure import measure_latency, measure_throughput
from nanobench.provenance import (PROVENANCE_KEYS, collect_provenance, make_bundle, result_filename,
                                        save_result, unpack_bundle)
from nanobench.results import (BUNDLE_SCHEMA, SCHEMA, engines_table, latency_rows, load_results,
                                     report_markdown, throughput_rows)
from nanobench.workloads import (WORKLOAD_SPECS, BenchRequest, latency_requests, make_workload,
                                       random_requests, redraw_ids, shared_prefix_len, total_output_tokens)
from nanoserve.model.tiny import QWEN3_0_6B_CONFIG


# ---- workloads ------------------------------------------------------------------------------
def test_random_workload_has_the_published_total():
    wl = make_workload("random")
    assert len(wl) == 256
    assert total_output_tokens(wl) == 133_966
    assert all(100 <= len(r.prompt_token_ids) <= 1024 and 100 <= r.max_tokens <= 1024 for r in wl)
    ids = [t for r in wl for t in r.prompt_token_ids]
    assert min(ids) >= 0 and max(ids) <= 10000


def test_shared_prefix_workload_has_the_published_total():
    wl = make_workload("shared-prefix")
    assert total_output_tokens(wl) == 141_752
    assert shared_prefix_len(wl) == 1024
    assert all(1124 <= len(r.prompt_token_ids) <= 2048 for r in wl)


def test_workload_equals_the_global_random_recipe():
    state = random.getstate()
    try:
        random.seed(0)
        prompts = [[random.randint(0, 10000) for _ in range(random.randint(100, 1024))] for _ in range(256)]
        max_tokens = [random.randint(100, 1024) for _ in range(256)]
    finally:
        random.setstate(state)
    wl = make_workload("random")
    assert [list(r.prompt_token_ids) for r in wl] == prompts
    assert [r.max_tokens for r in wl] == max_tokens


def test_workloads_are_deterministic_and_seeded():
    assert make_workload("shared-prefix", 16) == make_workload("shared-prefix", 16)
    assert make_workload("random", 16, seed=1) != make_workload("random", 16, seed=0)


@pytest.mark.parametrize("kwargs, error", [
    (dict(num_requests=0), ValueError), (dict(num_requests=2.0), TypeError),
    (dict(prompt_len=(10, 5)), ValueError), (dict(output_len=7), TypeError), (dict(prefix_len=-1), ValueError),
])
def test_workload_arguments_are_checked(kwargs, error):
    with pytest.raises(error):
        random_requests(**kwargs)


def test_unknown_workload_is_rejected():
    with pytest.raises(ValueError, match="unknown throughput workload"):
        make_workload("latency")
    with pytest.raises(ValueError, match="comma list"):
        parse_workloads("random,typo")
    assert parse_workloads("random, latency") == ["random", "latency"]


def test_redraw_keeps_shapes_and_the_shared_prefix():
    wl = make_workload("shared-prefix", 8)
    again = redraw_ids(wl, seed=5)
    assert [len(r.prompt_token_ids) for r in again] == [len(r.prompt_token_ids) for r in wl]
    assert [r.max_tokens for r in again] == [r.max_tokens for r in wl]
    assert shared_prefix_len(again) >= 1024
    assert all(a.prompt_token_ids != b.prompt_token_ids for a, b in zip(again, wl))


def test_latency_requests_shape():
    reqs = latency_requests(8, 128, 128, seed=3)
    assert len(reqs) == 8 and {len(r.prompt_token_ids) for r in reqs} == {128} and {r.max_tokens for r in reqs} == {128}
    assert latency_requests(8, seed=3) == reqs and latency_requests(8, seed=4) != reqs


# ---- floor ----------------------------------------------------------------------------------
def test_qwen3_0_6b_costs():
    cost = model_cost(QWEN3_0_6B_CONFIG)
    assert cost.num_params == 596_049_920
    assert cost.kv_bytes_per_token == 2 * 28 * 8 * 128 * 2
    assert cost.weight_bytes == 2 * cost.num_params  # tied: the embedding is read once, as the LM head
    bw = H200_DATASHEET["memory_bandwidth_bytes_s"]
    one = decode_step_floor_s(cost, 1, 1, bw, H200_DATASHEET["bf16_dense_flops_s"])
    assert one == pytest.approx((cost.weight_bytes + cost.kv_bytes_per_token) / bw)
    with pytest.raises(ValueError):
        model_cost({"hidden_size": 8})


def test_workload_floor_counts_steps_and_tokens():
    cost = model_cost(QWEN3_0_6B_CONFIG)
    reqs = [BenchRequest((1,) * 10, 5), BenchRequest((2,) * 20, 3)]
    f = workload_floor(cost, reqs, 1e12, 1e15)
    assert f["output_tokens"] == 8 and f["decode_steps"] == 4
    # decode steps: batch 2 at k=1,2 (contexts 11+21, 12+22), then batch 1 at k=3,4 (13, 14)
    kv = (11 + 21) + (12 + 22) + 13 + 14
    assert f["decode_s"] == pytest.approx((4 * cost.weight_bytes + kv * cost.kv_bytes_per_token) / 1e12)
    shared = make_workload("shared-prefix", 16)
    once = workload_floor(cost, shared, 1e12, 1e15, cached_prefix=1024)
    each = workload_floor(cost, shared, 1e12, 1e15, cached_prefix=1024, prefix_read_once=False)
    assert once["total_s"] < each["total_s"]


# ---- measuring with a fake engine -------------------------------------------------------------
class FakeEngine:
    """Records what the harness asks; generates exactly max_tokens per request."""

    def __init__(self):
        self.calls, self.resets = [], 0

    def prepare(self, requests, temperature):
        return list(requests), temperature

    def run(self, prepared):
        requests, temperature = prepared
        self.calls.append((requests, temperature))
        return [r.max_tokens for r in requests]

    def run_timed(self, prepared):
        counts = self.run(prepared)
        return counts, time.perf_counter()

    def reset_prefix_cache(self):
        self.resets += 1
        return True

    def step_owner(self):
        return None


def test_measure_throughput_warms_up_resets_and_redraws():
    eng, wl = FakeEngine(), make_workload("random", 6)
    metrics, timeline = measure_throughput(eng, wl, runs=3, temperature=0.6, timeline=True)
    assert len(eng.calls) == 4 and len(eng.calls[0][0]) == 1          # one warm-up request first
    assert eng.calls[1][0] == wl and eng.calls[2][0] != wl             # run 0 is the workload itself
    assert [r.max_tokens for r in eng.calls[3][0]] == [r.max_tokens for r in wl]
    assert metrics["complete"] and metrics["output_tokens"] == total_output_tokens(wl)
    assert metrics["prefix_cache_reset"] == [True] * 3 and len(metrics["tok_s_runs"]) == 3
    assert timeline is None  # the fake exposes no step()


def test_throughput_metrics_carry_vllm_bench_throughput_keys():
    eng, wl = FakeEngine(), make_workload("random", 6)
    metrics, _ = measure_throughput(eng, wl, runs=3, temperature=0.6)
    m = metrics
    assert m["num_requests"] == 6 and m["elapsed_time"] in m["wall_s_runs"]
    run = m["wall_s_runs"].index(m["elapsed_time"])
    assert m["total_num_tokens"] == m["prompt_tokens"] + m["output_tokens_runs"][run]
    assert m["tokens_per_second"] == pytest.approx(m["total_num_tokens"] / m["elapsed_time"])
    assert m["requests_per_second"] == pytest.approx(6 / m["elapsed_time"])
    assert sorted(m["wall_s_runs"])[1] == m["elapsed_time"]  # the median run of three
    assert m["tokens_per_second"] > m["tok_s"]  # prompt tokens count too; the project's tok_s stays beside


def test_vllm_bench_throughput_flag_names_are_accepted(tmp_path):
    args = parse_run_args(["--engine", "nanoserve", "--workload", "random", "--model", str(tmp_path),
                           "--num-prompts", "7", "--input-len", "32", "--output-len", "8"])
    assert (args.num_requests, args.prompt_len, args.output_len) == (7, (32, 32), (8, 8))
    args = parse_run_args(["--engine", "nanoserve", "--workload", "random", "--model", str(tmp_path),
                           "--num-requests", "3", "--prompt-len", "4,12", "--output-len", "2,6"])
    assert (args.num_requests, args.prompt_len, args.output_len) == (3, (4, 12), (2, 6))


def test_measure_latency_reports_each_batch():
    eng = FakeEngine()
    m = measure_latency(eng, batch_sizes=(1, 4), length=8, reps=2)
    assert set(m["batches"]) == {"1", "4"}
    assert len(eng.calls) == 2 * (2 + 1)  # one call per repetition, plus a warm-up, per batch size
    assert all(len(reqs) == 4 and {r.max_tokens for r in reqs} == {8} for reqs, _ in eng.calls[3:])
    assert all(t == 0.0 for _, t in eng.calls)  # greedy
    b = m["batches"]["4"]
    assert len(b["tpot_ms_runs"]) == 2 and b["tpot_ms"] == pytest.approx(sorted(b["tpot_ms_runs"])[0] / 2
                                                                         + sorted(b["tpot_ms_runs"])[1] / 2)


def test_engine_options_are_shared_between_nanoserve_and_vllm(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    argv = ["--workload", "random", "--model", str(tmp_path), "--gpu-util", "0.8", "--enforce-eager"]
    ns = engine_options(run_parser().parse_args(["--engine", "nanoserve", *argv]))
    vl = engine_options(run_parser().parse_args(["--engine", "vllm", *argv]))
    assert ns == vl == {"max_model_len": 4096, "seed": 0, "gpu_memory_utilization": 0.8, "enforce_eager": True,
                        "enable_prefix_caching": True}
    no_tok = engine_options(run_parser().parse_args(["--engine", "vllm", "--workload", "random",
                                                     "--model", str(tmp_path / "empty")]))
    assert "skip_tokenizer_init" not in no_tok  # not a directory: a hub id keeps the engine default
    (tmp_path / "bare").mkdir()
    bare = engine_options(run_parser().parse_args(["--engine", "vllm", "--workload", "random", "--model",
                                                   str(tmp_path / "bare"), "--engine-arg", "max_num_seqs=128"]))
    assert bare["skip_tokenizer_init"] is True and bare["max_num_seqs"] == 128


# ---- results, report, bundles --------------------------------------------------------------
def fake_result(engine, workload, tok_s, session="s1", date="2026-01-01T00:00:00Z", **extra):
    metrics = ({"batches": {"1": {"ttft_ms": 10.0 * tok_s, "tpot_ms": 2.0 * tok_s}}} if workload == "latency"
               else {"tok_s": tok_s, "tok_s_runs": [tok_s, tok_s]})
    return {"schema": SCHEMA, "label": "gpu", "session": session, "date": date, "engine": engine,
            "workload": workload, "tag": None, "startup": {"startup_s": 1.0}, "memory": {}, "metrics": metrics,
            **extra}


def test_environment_keeps_only_engine_knobs(monkeypatch):
    from nanobench.provenance import environment

    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "0")
    monkeypatch.setenv("SOME_SECRET_TOKEN", "x")
    env = environment()
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and "SOME_SECRET_TOKEN" not in env


def test_provenance_fields_are_present():
    prov = collect_provenance()
    assert set(PROVENANCE_KEYS) <= set(prov)
    assert prov["torch"] and prov["nanoserve"] and prov["python"]
    assert "node" not in json.dumps(prov)


def test_file_names_and_no_overwrite(tmp_path):
    r = fake_result("nanoserve", "random", 100.0, tag="h200")
    assert result_filename(r) == "2026-01-01T000000Z_random_nanoserve_h200.json"
    assert result_filename(dict(r, label="cpu-smoke")).startswith("cpu-smoke-")
    with pytest.raises(ValueError):
        result_filename(dict(r, tag="../up"))
    path = save_result(r, tmp_path)
    with pytest.raises(FileExistsError):
        save_result(r, tmp_path)
    assert load_results(tmp_path)[0]["metrics"]["tok_s"] == 100.0 and path.exists()


def test_ratios_pair_engines_of_the_same_session():
    results = [fake_result("nanoserve", "random", 110.0), fake_result("vllm", "random", 100.0),
               fake_result("nanoserve", "random", 50.0, session="s2"),
               fake_result("nanoserve", "latency", 1.0), fake_result("vllm", "latency", 2.0)]
    rows = {(r["session"], r["engine"]): r for r in throughput_rows(results)}
    assert rows[("s1", "nanoserve")]["vs_vllm"] == pytest.approx(1.1)
    assert rows[("s1", "vllm")]["vs_vllm"] == pytest.approx(1.0)
    assert rows[("s2", "nanoserve")]["vs_vllm"] is None  # no vLLM in that session
    lat = {r["engine"]: r for r in latency_rows(results)}
    assert lat["nanoserve"]["tpot_vs_vllm"] == pytest.approx(0.5)
    text = report_markdown(results)
    assert "| s1 | random | nanoserve | 110 | 110 · 110 | 1.10 |" in text and "TPOT × vLLM" in text


def test_latest_result_per_engine_wins():
    results = [fake_result("vllm", "random", 100.0), fake_result("vllm", "random", 200.0, date="2026-01-02T00:00:00Z"),
               fake_result("nanoserve", "random", 100.0)]
    rows = {r["engine"]: r for r in throughput_rows(results)}
    assert rows["vllm"]["tok_s"] == 200.0 and rows["nanoserve"]["vs_vllm"] == pytest.approx(0.5)


def test_bundle_round_trip(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    for r in (fake_result("nanoserve", "random", 1.0), fake_result("vllm", "random", 2.0)):
        save_result(r, src)
    bundle = make_bundle([src])
    assert bundle["schema"] == BUNDLE_SCHEMA and len(bundle["files"]) == 2
    path = tmp_path / "results.json"
    path.write_text(json.dumps(bundle))
    written = unpack_bundle(path, dest)
    assert sorted(p.name for p in written) == sorted(p.name for p in src.glob("*.json"))
    assert load_results(dest) == load_results(src)
    assert len(unpack_bundle(path, dest)) == 2  # identical files: unpacking again is harmless
    assert {r["engine"] for r in load_results(path)} == {"nanoserve", "vllm"}  # a bundle reads as results too
    name = sorted(bundle["files"])[0]
    bundle["files"][name]["metrics"]["tok_s"] = 3.0
    path.write_text(json.dumps(bundle))
    with pytest.raises(FileExistsError):
        unpack_bundle(path, dest)
    bundle["files"] = {"../evil.json": bundle["files"][name]}
    path.write_text(json.dumps(bundle))
    with pytest.raises(ValueError, match="not a result file"):
        unpack_bundle(path, dest)


# ---- a tiny end-to-end run of the nanoserve engine on CPU -------------------------------------
def test_nanoserve_engine_smoke(tmp_path):
    pytest.importorskip("nanoserve.llm")
    pytest.importorskip("nanoserve.kv.prefix")  # the engine's default, prefix caching on
    from nanoserve.model.tiny import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "model")
    paths = run_benchmark(["--engine", "nanoserve", "--workload", "random,latency", "--model", str(model),
                           "--out", str(tmp_path / "out"), "--num-requests", "3", "--prompt-len", "4,12",
                           "--output-len", "2,6", "--max-token-id", "500", "--max-model-len", "64",
                           "--latency-len", "4", "--latency-batches", "1,2", "--latency-reps", "1",
                           "--device", "cpu", "--timeline", "--session", "smoke"])
    assert [p.name.split("_")[1] for p in paths] == ["random", "latency"]
    results = {r["workload"]: r for r in load_results(tmp_path / "out")}
    tput = results["random"]
    assert tput["label"] == "cpu-smoke" and paths[0].name.startswith("cpu-smoke-")
    assert tput["metrics"]["complete"] and tput["metrics"]["output_tokens"] == tput["metrics"]["expected_output_tokens"]
    assert tput["timeline"]["num_steps"] >= 6 and tput["engine_options"]["device"] == "cpu"
    assert tput["command"].startswith("python -m nanobench --engine nanoserve")
    assert set(PROVENANCE_KEYS) <= set(tput["provenance"]) and tput["startup"]["startup_s"] > 0
    assert set(results["latency"]["metrics"]["batches"]) == {"1", "2"}



def test_process_ready_leaves_out_the_harness_gpu_probe(monkeypatch):
    """The launch-to-ready clock counts the engine's start, not the seconds --measure-gpu spent meanwhile."""
    monkeypatch.setenv("NANOBENCH_LAUNCHED_AT", str(time.time() - 10.0))
    whole, less_probe = bench.process_ready_s(), bench.process_ready_s(harness_s=3.0)
    assert 10.0 <= whole < 11.0 and abs((whole - less_probe) - 3.0) < 0.5
    monkeypatch.delenv("NANOBENCH_LAUNCHED_AT")
    assert bench.process_ready_s(harness_s=3.0) is None

# ---- checks at the door and the cpu-smoke preset ---------------------------------------------
class EngineBuilt(Exception):
    """Raised instead of building an engine: the run got past every check."""


@pytest.fixture
def no_engine(monkeypatch):
    def refuse(*args, **kwargs):
        raise EngineBuilt

    monkeypatch.setattr(bench, "make_engine", refuse)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return smoke_model_dir(tmp_path_factory.mktemp("smoke"))


def test_gpu_defaults_on_a_tiny_model_fail_at_the_door_naming_each_fix(tiny_model, no_engine):
    with pytest.raises(BenchArgumentError) as err:
        run_benchmark(["--engine", "nanoserve", "--workload", "random", "--model", str(tiny_model), "--device", "cpu"])
    lines = str(err.value).splitlines()
    assert len(lines) == 3
    assert "--max-model-len 4096" in lines[0] and "pass --max-model-len 2048 or less" in lines[0]
    assert "vocabulary of 512 ids" in lines[1] and "pass --max-token-id 511 or less" in lines[1]
    assert "267,932 output tokens" in lines[2] and "--preset cpu-smoke" in lines[2] and "--allow-long-cpu-run" in lines[2]


def test_fixed_flags_pass_the_door(tiny_model, no_engine):
    argv = ["--engine", "nanoserve", "--workload", "random", "--model", str(tiny_model), "--device", "cpu",
            "--max-model-len", "2048", "--max-token-id", "511"]
    with pytest.raises(BenchArgumentError, match=r"generates [0-9,]+ output tokens"):
        run_benchmark(argv)
    with pytest.raises(EngineBuilt):
        run_benchmark(argv + ["--allow-long-cpu-run"])
    with pytest.raises(EngineBuilt):
        run_benchmark(argv + ["--num-requests", "4"])


def test_a_request_longer_than_max_model_len_is_refused(tiny_model, no_engine):
    with pytest.raises(BenchArgumentError, match="longest request needs 3072 tokens.*--max-model-len 2048"):
        run_benchmark(["--engine", "nanoserve", "--workload", "shared-prefix", "--model", str(tiny_model),
                       "--device", "cpu", "--max-model-len", "2048", "--max-token-id", "511", "--num-requests", "2"])


def test_command_line_errors_are_one_line_each_without_a_traceback(tiny_model, no_engine, capsys):
    assert bench.main(["--engine", "nanoserve", "--workload", "random", "--model", str(tiny_model),
                       "--device", "cpu", "--num-requests", "4"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == [line for line in err.splitlines() if line.startswith("python -m nanobench: error:")]
    assert len(err.splitlines()) == 2  # the length and the vocabulary; four requests are fine on a CPU
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--workload", "random"])
    assert exit_.value.code == 2 and "--preset cpu-smoke" in capsys.readouterr().err


def test_flags_given_with_a_preset_win(tiny_model):
    args = parse_run_args(["--preset", "cpu-smoke", "--model", str(tiny_model), "--num-requests", "2"])
    assert args.engine == "nanoserve" and args.device == "cpu" and args.progress is True
    assert args.num_requests == 2 and args.model == str(tiny_model)


def test_the_smoke_model_is_built_once_and_reused(tmp_path):
    first = smoke_model_dir(tmp_path)
    stamp = (first / "config.json").stat().st_mtime_ns
    assert smoke_model_dir(tmp_path) == first and (first / "config.json").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-qwen3"]  # no half-built copy left behind


def test_cpu_smoke_preset_runs_quickly_with_a_progress_bar(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path))  # the preset's model and results go here
    start = time.perf_counter()
    paths = run_benchmark(["--preset", "cpu-smoke"])
    elapsed = time.perf_counter() - start
    assert elapsed < 90, f"the cpu-smoke preset took {elapsed:.0f} s"
    assert [p.parent for p in paths] == [tmp_path / "cpu-smoke" / "results"] * 2
    results = {r["workload"]: r for r in load_results(paths[0].parent)}
    assert set(results) == {"random", "latency"}
    assert results["random"]["label"] == "cpu-smoke" and results["random"]["metrics"]["complete"]
    assert results["random"]["command"] == "python -m nanobench --preset cpu-smoke"
    err = capsys.readouterr().err
    assert "nanoserve random: 100%" in err and "nanoserve latency: 100%" in err


# ---- the new workloads, nano-vllm's adapter, the engines table --------------------------------
def test_new_workloads_have_fixed_totals_and_their_own_defaults():
    churn, prefill = make_workload("high-churn"), make_workload("prefill-bound")
    assert len(churn) == 1024 and total_output_tokens(churn) == 37_155
    assert all(16 <= len(r.prompt_token_ids) <= 128 and 8 <= r.max_tokens <= 64 for r in churn)
    assert len(prefill) == 128 and total_output_tokens(prefill) == 2_681
    assert all(2048 <= len(r.prompt_token_ids) <= 3072 for r in prefill)
    assert make_workload("high-churn", num_requests=8) == random_requests(8, (16, 128), (8, 64))
    assert set(WORKLOAD_SPECS) == {"random", "shared-prefix", "high-churn", "prefill-bound"}


def test_engines_table_puts_engines_side_by_side():
    results = [fake_result(e, w, tok_s) for e, w, tok_s in (("vllm", "random", 200.0), ("nanoserve", "random", 100.0),
                                                            ("nano-vllm", "random", 150.0),
                                                            ("transformers", "high-churn", 10.0))]
    lines = engines_table(results, "s1").splitlines()
    assert lines[0].split() == ["workload", "nanoserve", "vllm", "nano-vllm", "transformers"]
    assert lines[1].split() == ["random", "100", "(0.50×)", "200", "(1.00×)", "150", "(0.75×)", "–"]
    assert lines[2].split() == ["high-churn", "–", "–", "–", "10"]


def test_nano_vllm_flags_are_checked_at_the_door(tmp_path):
    args = parse_run_args(["--engine", "nano-vllm", "--workload", "random", "--model", str(tmp_path),
                           "--nano-vllm-path", "/somewhere", "--block-size", "256"])
    opts = engine_options(args)
    assert opts["nano_vllm_path"] == "/somewhere" and opts["block_size"] == 256
    with pytest.raises(BenchArgumentError, match="--nano-vllm-path applies to --engine nano-vllm only"):
        engine_options(parse_run_args(["--engine", "vllm", "--workload", "random", "--model", str(tmp_path),
                                       "--nano-vllm-path", "/somewhere"]))


FAKE_NANOVLLM = '''
from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False

    def __post_init__(self):
        assert self.temperature > 1e-10, "greedy sampling is not permitted"


class LLM:
    def __init__(self, model, **kwargs):
        self.kwargs = kwargs
        self.exited = False

    def generate(self, prompts, params, use_tqdm=True):
        for step in range(max(p.max_tokens for p in params)):  # as nano-vllm: one prefill step, then decodes
            self.step(prefill=step == 0)
        return [{"text": "", "token_ids": [1] * p.max_tokens} for p in params]

    def step(self, prefill=False):
        return [], 1 if prefill else -1

    def exit(self):
        self.exited = True
'''


def test_nano_vllm_adapter_with_a_stand_in_package(tmp_path, monkeypatch):
    import sys

    from nanobench.engines import NanoVllmEngine

    (tmp_path / "nano" / "nanovllm").mkdir(parents=True)
    (tmp_path / "nano" / "nanovllm" / "__init__.py").write_text(FAKE_NANOVLLM)
    (tmp_path / "nano" / "COMMIT").write_text("abc123\n")
    monkeypatch.setattr(sys, "path", list(sys.path))  # the adapter prepends the checkout; undone after the test
    monkeypatch.delitem(sys.modules, "nanovllm", raising=False)
    engine = NanoVllmEngine("model-dir", {"nano_vllm_path": str(tmp_path / "nano"), "block_size": 256, "seed": 0,
                                          "enable_prefix_caching": True, "max_model_len": 64})
    assert engine.llm.kwargs == {"kvcache_block_size": 256, "max_model_len": 64}
    assert engine.source() == {"path_name": "nano", "commit": "abc123"}
    metrics, _ = measure_throughput(engine, make_workload("random", 3, (4, 8), (2, 5)), runs=2, temperature=0.6)
    assert metrics["complete"] and metrics["prefix_cache_reset"] == [False, False]
    lat = measure_latency(engine, batch_sizes=(1,), length=3, reps=1)  # greedy: a tiny temperature instead
    assert set(lat["batches"]) == {"1"}
    llm = engine.llm
    engine.close()
    assert llm.exited
    with pytest.raises(ValueError, match="does not take options"):
        NanoVllmEngine("m", {"nano_vllm_path": str(tmp_path / "nano"), "num_kv_blocks": 4})
    monkeypatch.delitem(sys.modules, "nanovllm", raising=False)


def test_the_committed_four_engine_session_reads_as_one_table():
    from pathlib import Path

    results_dir = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    session = [r for r in load_results(results_dir) if r.get("session") == "2026-12-01T09:20:00Z"]
    if not session:
        pytest.skip("the four-engine session is not in this checkout")
    lines = engines_table(session, "2026-12-01T09:20:00Z").splitlines()
    assert lines[0].split() == ["workload", "nanoserve", "vllm", "nano-vllm", "transformers"]
    assert [line.split()[0] for line in lines[1:5]] == ["random", "shared-prefix", "high-churn", "prefill-bound"]
    assert all(r["metrics"]["complete"] for r in session if r["workload"] != "latency")
    nano_vllm = next(r for r in session if r["engine"] == "nano-vllm")
    assert len(nano_vllm["provenance"]["engine_source"]["commit"]) == 40
