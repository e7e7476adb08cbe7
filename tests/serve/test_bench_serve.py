"""The online benchmark client runs against the server for a few seconds and writes its JSON."""
import json
import math

import pytest

from conftest import MODEL_NAME
from nanobench.serve import main, parse_slos, percentiles, sample_requests


def test_bench_client_writes_json_with_percentiles(server, tmp_path):
    rc = main(["--base-url", server, "--model", MODEL_NAME, "--request-rate", "20", "--num-prompts", "8",
               "--input-len", "16", "--output-len", "4", "--label", "nanoserve", "--out", str(tmp_path),
               "--result-file", "run.json", "--goodput", "ttft:60000", "tpot:60000", "--ignore-eos"])
    assert rc == 0
    result = json.loads((tmp_path / "run.json").read_text())
    m = result["metrics"]
    assert m["completed"] == 8 and m["failed"] == 0
    assert m["total_output_tokens"] == 32 and m["total_input_tokens"] == 128
    assert m["goodput"] == pytest.approx(m["request_throughput"])
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        assert 0 < m[name]["p50"] <= m[name]["p90"] <= m[name]["p99"]
    assert result["provenance"]["nanoserve"] and result["command"].startswith("python -m nanobench serve")
    assert len(result["requests"]) == 8 and all(r["first_token"] <= r["end"] for r in result["requests"])
    assert result["config"]["ignore_eos"] is True


VLLM_KEYS = {"date", "label", "endpoint_type", "model_id", "num_prompts", "request_rate", "burstiness",
             "max_concurrency", "duration", "completed", "total_input_tokens", "total_output_tokens",
             "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
             "input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"}


def test_result_json_has_vllm_bench_serve_keys(server, tmp_path):
    rc = main(["--base-url", server, "--model", MODEL_NAME, "--num-prompts", "4", "--input-len", "8",
               "--output-len", "3", "--out", str(tmp_path), "--result-file", "vllm.json",
               "--metric-percentiles", "50,99"])
    assert rc == 0
    result = json.loads((tmp_path / "vllm.json").read_text())
    assert VLLM_KEYS <= set(result)
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert {f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms", f"p50_{name}_ms", f"p99_{name}_ms"} <= set(result)
    n = result["num_prompts"]
    assert n == 4 == result["completed"] and result["input_lens"] == [8] * n and result["errors"] == [""] * n
    assert all(1 <= k <= 3 for k in result["output_lens"]) and sum(result["output_lens"]) == result["total_output_tokens"]
    assert all(0 < t < 60 for t in result["ttfts"]) and all(isinstance(t, str) for t in result["generated_texts"])
    assert [len(gaps) for gaps in result["itls"]] == [k - 1 for k in result["output_lens"]]  # one token a chunk
    assert result["mean_ttft_ms"] == result["metrics"]["ttft_ms"]["mean"] and result["provenance"]["nanoserve"]
    assert result["config"]["ignore_eos"] is False  # vLLM's default: outputs may stop at EOS



VLLM_FILE = "benchmarks/results/serve_vllm_client_h200_2026-12-02/vllm_client/vllm-rateinf.json"  # vllm bench serve's


def test_result_json_has_every_key_of_a_recorded_vllm_bench_serve_file(server, tmp_path):
    """Every top-level key of a file vLLM 0.24's own `vllm bench serve` wrote (same percentile flags) is ours too."""
    from pathlib import Path

    recorded = json.loads((Path(__file__).parents[2] / VLLM_FILE).read_text())
    rc = main(["--base-url", server, "--model", MODEL_NAME, "--num-prompts", "4", "--input-len", "8",
               "--output-len", "3", "--request-rate", "inf", "--out", str(tmp_path), "--result-file", "ours.json",
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"])
    assert rc == 0
    result = json.loads((tmp_path / "ours.json").read_text())
    assert set(recorded) - set(result) == set()
    assert {k: type(result[k]) for k in recorded if recorded[k] is not None} == \
        {k: type(v) for k, v in recorded.items() if v is not None}
    n = result["num_prompts"]
    assert len(result["start_times"]) == n and result["backend"] == "openai" and result["tokenizer_id"] == MODEL_NAME
    assert 1 <= result["max_concurrent_requests"] <= n and result["rtfx"] == 0.0
    assert 1 <= result["max_output_tokens_per_s"] <= result["total_output_tokens"]

def test_bench_client_counts_failures(tmp_path, capsys):
    rc = main(["--base-url", "http://127.0.0.1:9", "--model", "x", "--num-prompts", "2", "--input-len", "4",
               "--output-len", "2", "--out", str(tmp_path), "--result-file", "fail.json"])
    assert rc == 1
    assert not (tmp_path / "fail.json").exists()  # nothing measured: no result a summary could mistake for one
    out = capsys.readouterr().out  # says why nothing completed
    assert "0 / 2 requests completed" in out and "connection refused to http://127.0.0.1:9/v1/completions" in out
    assert "no result written" in out


def test_nanoserve_help_lists_its_commands(capsys):
    from nanoserve.serve import main as nanoserve_main

    assert nanoserve_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "serve MODEL" in out and "bench" in out


def test_workload_and_statistics_helpers():
    reqs = sample_requests(5, 10, 3, range_ratio=0.5, seed=1)
    assert all(5 <= len(p) == n <= 15 and 1 <= o <= 4 for p, n, o in reqs)
    assert sample_requests(5, 10, 3, seed=1) == sample_requests(5, 10, 3, seed=1)
    stats = percentiles([1, 2, 3, 4])
    assert stats["mean"] == stats["p50"] == stats["median"] == 2.5 and stats["p90"] == pytest.approx(3.7)
    assert parse_slos(["ttft:200", "tpot:50"]) == {"ttft": 200.0, "tpot": 50.0}
    with pytest.raises(ValueError, match="--goodput"):
        parse_slos(["latency:3"])
    with pytest.raises(ValueError, match="range-ratio"):
        sample_requests(1, 4, 4, range_ratio=1.5)
    assert not math.isnan(percentiles([0.5])["p99"])


def test_vllm_flag_names_sharegpt_file_and_chat_backend(server, tmp_path):
    """vllm bench serve's flags, a ShareGPT-format file as the dataset, streamed chat; flat vLLM-named statistics."""
    convs = [{"conversations": [{"from": "human", "value": f"Question number {i}: " + "tell me more " * 6},
                                {"from": "gpt", "value": "An answer of some length " * 2}]} for i in range(6)]
    convs.append({"conversations": [{"from": "human", "value": "only one turn"}]})  # skipped: no answer
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(convs))
    rc = main(["--backend", "openai-chat", "--base-url", server, "--model", MODEL_NAME, "--dataset-name", "sharegpt",
               "--dataset-path", str(data), "--sharegpt-output-len", "4", "--num-prompts", "5", "--request-rate", "inf",
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--save-result",
               "--result-dir", str(tmp_path), "--result-filename", "chat.json", "--ignore-eos"])
    assert rc == 0
    result = json.loads((tmp_path / "chat.json").read_text())
    m = result["metrics"]
    assert result["config"]["endpoint"] == "/v1/chat/completions" and result["config"]["dataset_name"] == "sharegpt"
    assert m["completed"] == 5 and m["total_output_tokens"] == 20
    for name in ("ttft", "tpot", "itl", "e2el"):
        for key in ("mean", "median", "std", "p50", "p99"):
            assert m[f"{key}_{name}_ms"] is not None
    assert m["median_ttft_ms"] == m["ttft_ms"]["median"] and m["std_e2el_ms"] >= 0


def test_old_flag_names_still_work():
    from nanobench.serve import bench_serve_parser

    new = bench_serve_parser().parse_args(["--model", "m", "--random-input-len", "7", "--random-output-len", "3",
                                           "--result-dir", "d", "--result-filename", "f.json"])
    old = bench_serve_parser().parse_args(["--model", "m", "--input-len", "7", "--output-len", "3", "--out", "d",
                                           "--result-file", "f.json"])
    assert vars(new) == vars(old) and (new.input_len, new.output_len, new.out, new.result_file) == (7, 3, "d", "f.json")
