"""Checkers for chapter 16's exercises (serving)."""
import json
import random

from nanobench.serve import RequestResult

__all__ = ["CHECKS"]


def _reference(result, slos) -> bool:
    """Within every SLO: TTFT, TPOT over the tokens after the first, end-to-end latency (ms)."""
    measured = {"ttft": 1e3 * (result.first_token - result.start), "e2el": 1e3 * (result.end - result.start),
                "tpot": 1e3 * (result.end - result.first_token) / (result.output_tokens - 1)
                if result.output_tokens > 1 else 0.0}
    return all(measured[k] <= v for k, v in slos.items())


def _cases():
    """Requests near the SLO edges, seeded; plus the one-token request that has no TPOT."""
    rng = random.Random(0)
    out = [RequestResult(8, 1, start=1.0, first_token=1.3, end=1.3, output_tokens=1)]
    for _ in range(300):
        start = rng.uniform(0, 5)
        first = start + rng.uniform(0.05, 0.8)
        n = rng.randint(2, 200)
        out.append(RequestResult(8, n, start=start, first_token=first, end=first + (n - 1) * rng.uniform(0.01, 0.09),
                                 output_tokens=n))
    return out


def check_meets_slos(meets_slos) -> str:
    """12.1: one request against a set of SLOs in milliseconds."""
    for slos in ({"ttft": 500}, {"tpot": 50}, {"e2el": 5000}, {"ttft": 500, "tpot": 50}, {}):
        for r in _cases():
            want, got = _reference(r, slos), meets_slos(r, slos)
            assert bool(got) == want, (
                f"hint: with SLOs {slos}, a request with TTFT {1e3 * (r.first_token - r.start):.0f} ms, "
                f"{r.output_tokens} tokens and E2E {1e3 * (r.end - r.start):.0f} ms should give {want}; times are "
                "seconds, SLOs milliseconds, and TPOT spreads end - first_token over the tokens after the first")
    return "goodput = requests within every SLO per second; a server can raise throughput while goodput falls"


def _reference_sse(lines) -> list:
    """The JSON payloads of an event stream's `data:` lines, up to `data: [DONE]`."""
    out = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        out.append(json.loads(data))
    return out


SSE_CASES = [
    ['data: {"choices": [{"index": 0, "text": "Hi"}]}', "", 'data: {"choices": [{"index": 0, "text": "!"}]}', "",
     "data: [DONE]", ""],
    [": a comment line keeps the connection alive", "", 'data:{"choices": []}', "", "data: [DONE]"],
    ['data: {"error": {"code": 503}}', "", "data: [DONE]", "", 'data: {"late": true}', ""],
    ["event: ping", "", "data:   [DONE]  "],
    [],
]


def check_read_sse(read_sse) -> str:
    """16.7: a stream's lines -> its JSON payloads, in order, up to [DONE]."""
    for lines in SSE_CASES:
        want, got = _reference_sse(lines), read_sse(list(lines))
        assert list(got) == want, (
            f"hint: for the lines {lines!r} expected {want!r}, got {got!r}. Only `data:` lines carry events "
            "(the space after the colon is optional), comments and other fields are skipped, and `data: [DONE]` "
            "ends the stream: nothing after it counts")
    return "an SSE stream is framed by lines: `data:` carries one JSON event, [DONE] ends it"


CHECKS = {"16.1": check_meets_slos, "16.7": check_read_sse}
