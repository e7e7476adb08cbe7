"""ServerMetrics on prometheus_client: vLLM's names and meanings, one registry per server, without a server."""
from types import SimpleNamespace

from nanoserve.entrypoints.metrics import ServerMetrics, parse_metrics
from nanoserve.outputs import RequestMetrics

LABEL = 'model_name="tiny"'


def snapshot(**extra) -> dict:
    return {"num_requests_running": 1, "num_requests_waiting": 2, "kv_blocks_used": 3, "kv_blocks_total": 12,
            "prefix_cache_queries": 10, "prefix_cache_hits": 4, "num_preemptions": 5, "stats": None, **extra}


def choice(n_tokens: int, reason=None):
    return SimpleNamespace(index=0, token_ids=[7] * n_tokens, finish_reason=reason)


def run_request(metrics: ServerMetrics, deltas: list, times: list, timings: RequestMetrics | None = None):
    """Feed one single-choice request's deltas (token counts) at the given loop times, as RequestGroup does."""
    group = SimpleNamespace(arrival=0.0, first_token_time={"r": times[0]}, last_token_time={},
                            num_prompt_tokens={"r": 6}, num_output_tokens={"r": sum(deltas)})
    for i, (n, now) in enumerate(zip(deltas, times)):
        last = i == len(deltas) - 1
        out = SimpleNamespace(request_id="r", outputs=[choice(n, "length" if last else None)], finished=last,
                              metrics=timings if last else None)
        metrics.observe(group, out, now)


def test_time_per_output_token_is_observed_per_token_not_per_request():
    m = ServerMetrics("tiny")
    timings = RequestMetrics(arrival_time=100.0, first_scheduled_time=100.5, first_token_time=101.0,
                             last_token_time=103.0)
    run_request(m, [1, 1, 1, 1, 1], [1.0, 1.5, 2.0, 2.5, 3.0], timings)
    v = parse_metrics(m.render(snapshot()))
    assert v[f"vllm:time_per_output_token_seconds_count{{{LABEL}}}"] == 4  # four gaps between five tokens
    assert v[f"vllm:inter_token_latency_seconds_count{{{LABEL}}}"] == 4
    assert abs(v[f"vllm:inter_token_latency_seconds_sum{{{LABEL}}}"] - 2.0) < 1e-9
    assert v[f"vllm:request_time_per_output_token_seconds_count{{{LABEL}}}"] == 1
    assert v[f"vllm:time_to_first_token_seconds_count{{{LABEL}}}"] == 1
    for name, seconds in (("queue", 0.5), ("prefill", 0.5), ("decode", 2.0), ("inference", 2.5)):
        assert abs(v[f"vllm:request_{name}_time_seconds_sum{{{LABEL}}}"] - seconds) < 1e-9, name
    assert v[f"vllm:generation_tokens_total{{{LABEL}}}"] == 5 == v["nanoserve:generation_tokens_total"]
    assert v[f'vllm:request_success_total{{finished_reason="length",{LABEL}}}'] == 1


def test_engine_state_is_read_at_scrape_time():
    m = ServerMetrics()
    m.model_name = "tiny"  # as build_app names it: every series under the served name only, from 0
    v = parse_metrics(m.render(snapshot()))
    assert v[f"vllm:prompt_tokens_total{{{LABEL}}}"] == 0 == v["nanoserve:prompt_tokens_total"]
    assert not any('model_name=""' in k for k in v)
    assert v[f"vllm:num_requests_waiting{{{LABEL}}}"] == 2 and v[f"vllm:kv_cache_usage_perc{{{LABEL}}}"] == 0.25
    assert v[f"vllm:num_preemptions_total{{{LABEL}}}"] == 5 and v[f"vllm:prefix_cache_hits_total{{{LABEL}}}"] == 4
    assert not any(k.startswith("vllm:spec_decode") for k in v)  # an engine that does not draft has none


def test_spec_decode_counters_come_from_the_engine_stats():
    stats = SimpleNamespace(num_steps=9, num_drafts=4, num_draft_tokens=12, num_accepted_tokens=7,
                            num_accepted_tokens_per_pos=[4, 2, 1])
    v = parse_metrics(ServerMetrics("tiny").render(snapshot(stats=stats)))
    assert v[f"vllm:spec_decode_num_drafts_total{{{LABEL}}}"] == 4
    assert v[f"vllm:spec_decode_num_draft_tokens_total{{{LABEL}}}"] == 12
    assert v[f"vllm:spec_decode_num_accepted_tokens_total{{{LABEL}}}"] == 7
    per_pos = {k: n for k, n in v.items() if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total")}
    assert per_pos == {f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABEL},position="{i}"}}': n
                       for i, n in enumerate([4, 2, 1])}


def test_two_servers_in_one_process_keep_their_own_series():
    a, b = ServerMetrics("a"), ServerMetrics("b")  # the same metric names twice: no clash in a global registry
    run_request(a, [1, 1], [1.0, 2.0])
    assert parse_metrics(a.render(snapshot()))['vllm:generation_tokens_total{model_name="a"}'] == 2
    assert parse_metrics(b.render(snapshot()))['vllm:generation_tokens_total{model_name="b"}'] == 0  # b saw none


def test_a_live_server_observes_each_token_gap(server):
    import httpx

    from conftest import MODEL_NAME, metrics

    def counts():
        m = metrics(server)
        label = f'model_name="{MODEL_NAME}"'
        return {name: m[f"vllm:{name}_count{{{label}}}"] for name in (
            "time_per_output_token_seconds", "inter_token_latency_seconds", "request_queue_time_seconds",
            "request_prefill_time_seconds", "request_decode_time_seconds", "e2e_request_latency_seconds")}

    before = counts()
    r = httpx.post(server + "/v1/completions", json={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 5,
                                                     "ignore_eos": True}, timeout=60, trust_env=False)
    assert r.status_code == 200
    grew = {name: counts()[name] - before[name] for name in before}
    assert grew["time_per_output_token_seconds"] == grew["inter_token_latency_seconds"] == 4  # 5 tokens, 4 gaps
    assert all(grew[name] == 1 for name in grew if name.startswith(("request_", "e2e")))
