"""Timing helpers shared by the GPU probes: kernels replayed in a CUDA graph, and an engine's decode time per token."""
import time

import torch


def graph_us(calls: list, reps: int = 20) -> float:
    """µs per call: the zero-argument `calls` captured back to back in one CUDA graph, replayed `reps` times."""
    for call in calls:  # compiles and warms up outside the capture
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps / len(calls)


def tpot_ms(llm, batch: int, prompt_len: int = 128, out_len: int = 256, runs: int = 5) -> list:
    """Decode ms per token, `runs` times: (time for out_len tokens - time for 1 token) / (out_len - 1)."""
    from nanoserve import SamplingParams

    prompts = [{"prompt_token_ids": [(7 * i + 13 * j) % 30000 + 100 for j in range(prompt_len)]} for i in range(batch)]
    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=0.0)
    many = SamplingParams(max_tokens=out_len, ignore_eos=True, temperature=0.0)
    llm.generate(prompts, many, use_tqdm=False)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        llm.generate(prompts, one, use_tqdm=False)
        t1 = time.perf_counter()
        llm.generate(prompts, many, use_tqdm=False)
        out.append(((time.perf_counter() - t1) - (t1 - t0)) / (out_len - 1) * 1000)
    return out
