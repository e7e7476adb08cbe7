"""The serving benchmark's statistics are numpy's (linear interpolation), as `vllm bench serve` reports them."""
import numpy as np
import pytest

from nanobench.serve import RequestResult, percentiles, summarize

# eight requests' latencies in ms: p90 falls between the 7th and the 8th value
LATENCIES = [31.0, 35.0, 38.0, 40.0, 44.0, 47.0, 52.0, 152.0]


def test_percentiles_match_numpy():
    stats = percentiles(LATENCIES, (25, 50, 90, 99, 99.9))
    a = np.array(LATENCIES)
    assert stats["mean"] == pytest.approx(a.mean()) and stats["median"] == pytest.approx(np.median(a))
    assert stats["std"] == pytest.approx(a.std())  # the population's, as numpy's default and vLLM
    for p in (25, 50, 90, 99, 99.9):
        assert stats[f"p{p:g}"] == pytest.approx(np.percentile(a, p))
    assert stats["p90"] == pytest.approx(82.0)  # nearest rank would say 152
    assert percentiles([]) == dict.fromkeys(["mean", "median", "std", "p50", "p90", "p99"])


def test_summary_has_vllm_names_over_the_same_values():
    results = []
    for i, ttft in enumerate(LATENCIES):
        start = float(i)
        first = start + ttft / 1e3
        chunks = [first + k * 0.002 * (i + 1) for k in range(5)]  # 5 chunks, one token each
        results.append(RequestResult(prompt_len=16, max_tokens=5, start=start, first_token=first, end=chunks[-1],
                                     output_tokens=5, chunk_times=chunks))
    results.append(RequestResult(prompt_len=16, max_tokens=5, error="HTTP 500"))
    s = summarize(results, duration=10.0, metric_percentiles=(50, 99))
    assert s["completed"] == 8 and s["failed"] == 1
    assert s["total_input_tokens"] == 128 and s["total_output_tokens"] == 40
    assert s["output_throughput"] == pytest.approx(4.0) and s["total_token_throughput"] == pytest.approx(16.8)
    assert s["p99_ttft_ms"] == pytest.approx(np.percentile(LATENCIES, 99))
    assert s["median_ttft_ms"] == pytest.approx(np.median(LATENCIES)) == s["p50_ttft_ms"]
    tpots = [2.0 * (i + 1) for i in range(8)]  # (end - first) / (5 - 1) in ms
    assert s["mean_tpot_ms"] == pytest.approx(np.mean(tpots)) and s["std_tpot_ms"] == pytest.approx(np.std(tpots))
    itls = [2.0 * (i + 1) for i in range(8) for _ in range(4)]
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itls, 99))
    assert s["ttft_ms"]["p90"] == pytest.approx(np.percentile(LATENCIES, 90))
