"""The online benchmark client runs against the server for a few seconds and writes its JSON."""
import json
import math

import pytest

from conftest import MODEL_NAME
from nanobench.serve import main, parse_slos, percentiles, sample_requests


def test_bench_client_writes_json_with_percentiles(server, tmp_path):
    rc = main(["--base-url", server, "--model", MODEL_NAME, "--request-rate", "20", "--num-prompts", "8",
               "--input-len", "16", "--output-len", "4", "--label", "nanoserve", "--out", str(tmp_path),
               "--result-file", "run.json", "--goodput", "ttft:60000", "tpot:60000"])
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
    assert percentiles([1, 2, 3, 4]) == {"mean": 2.5, "p50": 2, "p90": 4, "p99": 4}
    assert parse_slos(["ttft:200", "tpot:50"]) == {"ttft": 200.0, "tpot": 50.0}
    with pytest.raises(ValueError, match="--goodput"):
        parse_slos(["latency:3"])
    with pytest.raises(ValueError, match="range-ratio"):
        sample_requests(1, 4, 4, range_ratio=1.5)
    assert not math.isnan(percentiles([0.5])["p99"])
