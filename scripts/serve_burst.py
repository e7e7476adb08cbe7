"""A burst of text prompts through the server's AsyncEngine on the CPU, with the tokenizer's encode as it is and
with the Rust library's `encode`, which holds the interpreter lock (issue 36, 2026-12-06).

The tiny random Qwen3 with the real Qwen3 tokenizer; the model's forward is stubbed by a sleep as long as an H100's
step would take (3 ms plus 4 µs per token), so what is left is the host: tokenizing threads, the engine's worker
thread and the event loop that delivers tokens. All prompts are sent at once, as `vllm bench serve` does at rate
`inf`; per request, when its tokens were ready and when its first token reached the loop. Arms alternate. Writes
JSON with provenance and prints a table last:

    python scripts/serve_burst.py --out benchmarks/results/serve_burst_cpu.json
"""
import argparse
import asyncio
import functools
import json
import os
import random
import shlex
import statistics
import sys
import tempfile
import time

import torch

from nanobench.provenance import collect_provenance, utc_now
from nanoserve.engine.engine import LLMEngine
from nanoserve.entrypoints.async_engine import AsyncEngine
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams
from nanoserve.tokenizer import FastTokenizer

NOW = FastTokenizer.encode


def lock_holding_encode(self, text, *args, add_special_tokens: bool = True, **kwargs):
    """FastTokenizer.encode as it was before 2026-12-06: the Rust library's `encode`, which holds the lock."""
    return self._backend.encode(text, add_special_tokens=add_special_tokens).ids


ARMS = {"encode_batch (lock let go)": NOW, "encode (lock held)": lock_holding_encode}


STUB_ENGINE_ARGS = dict(device="cpu", enforce_eager=True, max_model_len=2048, max_num_seqs=256,
                        max_num_batched_tokens=8192)


def stub_forward(engine: LLMEngine) -> None:
    """Replace the model's forward by a sleep as long as a GPU step that returns zeros (in whichever process)."""
    torch.set_num_threads(1)
    runner = engine.core.executor
    vocab = runner.model_config.vocab_size

    def forward(step):
        time.sleep(0.003 + 4e-6 * len(step.input_ids))  # sleeping lets go of the lock, as waiting on a GPU does
        return torch.zeros(len(step.logits_indices), vocab, dtype=runner.dtype)

    runner.forward = forward


GPU_ENGINE_ARGS = dict(dtype="bfloat16", max_model_len=2048, max_num_seqs=256, max_num_batched_tokens=8192,
                       gpu_memory_utilization=0.4)  # two engines share one GPU when arms alternate


def served_engine(model_dir: str, process: bool = False, gpu: bool = False, on_start=None,
                  **overrides) -> AsyncEngine:
    """The server's AsyncEngine over a CPU engine whose forward is stubbed (or with gpu=True, the real model on the
    GPU): on a worker thread of this process, or (process=True) in a process of its own (chapter 16 section 6).
    `on_start(engine)` runs in the engine's process once it is built (a picklable function); `overrides` replace
    engine options."""
    kwargs, stub = (GPU_ENGINE_ARGS, None) if gpu else (STUB_ENGINE_ARGS, stub_forward)
    kwargs = {**kwargs, **overrides}
    if on_start is not None:
        stub = functools.partial(_in_turn, stub, on_start) if stub is not None else on_start
    if process:
        from nanoserve.engine.config import EngineConfig
        from nanoserve.entrypoints.engine_process import EngineProcess

        return AsyncEngine(EngineProcess(EngineConfig(model=model_dir, **kwargs), on_start=stub))
    engine = LLMEngine.from_args(model_dir, **kwargs)
    if stub is not None:
        stub(engine)
    return AsyncEngine(engine)


def _in_turn(first, second, engine) -> None:
    first(engine)
    second(engine)


async def burst(engine: AsyncEngine, prompts: list, max_tokens: int) -> dict:
    """Send every prompt at once; seconds from the send to each request's tokens and first token, in send order."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
    tokenized = {}
    real_prompt = engine.tokenizing.prompt

    async def timed_prompt(prompt, add_special_tokens=True):
        out = await real_prompt(prompt, add_special_tokens)
        tokenized[prompt] = time.perf_counter()
        return out

    engine.tokenizing.prompt = timed_prompt

    async def one(i: int, prompt: str) -> tuple:
        group = await engine.generate([prompt], params, f"burst-{i}")
        await group.final_outputs()
        return tokenized[prompt], group.first_token_time[group.request_ids[0]]

    start = time.perf_counter()
    times = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    engine.tokenizing.prompt = real_prompt
    return {"tokenized_s": [t - start for t, _ in times], "ttft_s": [f - start for _, f in times],
            "wall_s": time.perf_counter() - start}


def quantiles(xs: list) -> list:
    """Min, p10, median, p90, max in ms."""
    xs = sorted(xs)
    return [round(1000 * xs[int(q * (len(xs) - 1))], 1) for q in (0, 0.1, 0.5, 0.9, 1)]


def order_correlation(ttft: list) -> float:
    """Spearman's rank correlation of first-token time with send order (1: strictly in turn)."""
    ranks = {i: r for r, i in enumerate(sorted(range(len(ttft)), key=ttft.__getitem__))}
    n = len(ttft)
    return 1 - 6 * sum((i - ranks[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=2, help="each arm this many times, arms alternating")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_checkpoint(tmp, seed=0, with_tokenizer=True)
        engine = served_engine(str(model))
    rng = random.Random(0)
    tok = engine.tokenizer
    prompts = [tok.decode([rng.randrange(0, 150000) for _ in range(args.prompt_len)]) for _ in range(args.prompts)]
    loop = asyncio.new_event_loop()
    loop.run_until_complete(burst(engine, prompts[:8], 2))  # every path once
    runs = {name: [] for name in ARMS}
    for _ in range(args.repeats):
        for name, encode in ARMS.items():
            FastTokenizer.encode = encode
            try:
                run = loop.run_until_complete(burst(engine, prompts, args.max_tokens))
            finally:
                FastTokenizer.encode = NOW
            run["order_correlation"] = order_correlation(run["ttft_s"])
            runs[name].append(run)
            print(f"{name:28s} tokens ready {quantiles(run['tokenized_s'])} ms, first token {quantiles(run['ttft_s'])}"
                  f" ms, order correlation {run['order_correlation']:.2f}", flush=True)
    engine.shutdown()
    loop.close()
    print("\narm                          median first token, ms   last prompt tokenized, ms   order correlation")
    for name, rs in runs.items():
        print(f"{name:28s} " + " · ".join(f"{1000 * statistics.median(r['ttft_s']):7.1f}" for r in rs) + "   "
              + " · ".join(f"{1000 * max(r['tokenized_s']):7.1f}" for r in rs) + "   "
              + " · ".join(f"{r['order_correlation']:.2f}" for r in rs))
    if args.out:
        provenance = {**collect_provenance(), "cores": os.cpu_count(), "date": utc_now(),
                      "command": shlex.join(["python", *sys.argv]), "config": vars(args),
                      "model": "make_tiny_checkpoint(with_tokenizer=True), forward stubbed by sleep(3 ms + 4 µs "
                               "per token)"}
        with open(args.out, "w") as f:
            json.dump({"provenance": provenance, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
