"""`nanoserve serve --speculative-config`: a speculating server answers like a plain one and reports vLLM's
spec-decode counters; a bad configuration stops the CLI with one line."""
import json
import subprocess
import sys

import httpx

from conftest import MODEL_NAME, metrics

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
BODY = {"model": MODEL_NAME, "prompt": "one two three one two three one two three one two", "max_tokens": 24,
        "temperature": 0, "ignore_eos": True}


def test_speculating_server_matches_the_plain_one_and_counts_drafts(start_server, server):
    spec = start_server("--speculative-config", json.dumps(SPEC))
    want = httpx.post(server + "/v1/completions", json=BODY, timeout=120, trust_env=False).json()
    got = httpx.post(spec.url + "/v1/completions", json=BODY, timeout=120, trust_env=False).json()
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    assert got["usage"] == want["usage"]
    values = metrics(spec.url)
    label = f'{{model_name="{MODEL_NAME}"}}'
    drafted = values[f"vllm:spec_decode_num_draft_tokens_total{label}"]
    assert drafted > 0 and 0 <= values[f"vllm:spec_decode_num_accepted_tokens_total{label}"] <= drafted


def test_bad_speculative_config_is_one_line_and_exit_2(tiny_model_dir):
    done = subprocess.run([sys.executable, "-m", "nanoserve.serve", "serve", str(tiny_model_dir), "--device", "cpu",
                           "--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}'],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "speculative_config.method" in lines[0], done.stderr
