"""Chapter 13's merge in one Triton launch against its torch form (masked_fill + merge_attention): µs per layer call
in a CUDA graph, and the engine's `shared-prefix` throughput with each and with the cascade switched off, engines in
turn, ROUNDS times (default 2), on one GPU.

Run from the repository root: [ROUNDS=N] python scripts/gpu/cascade_merge_probe.py OUT_JSON
"""
import contextlib
import gc
import os
import statistics
import sys
import time

import torch

import nanoserve.attention.cascade as cascade
from probe_timing import graph_us, random_qwen3_0_6b, write_result  # this folder

HEADS, DIM, LAYERS = 16, 128, 28  # Qwen3-0.6B's query heads and head size; one call per layer


def torch_merge(out_a, lse_a, out_b, lse_b, members):
    """The merge as the cascade variant wrote it before: the members' mask, then section 2's merge_attention."""
    return cascade.merge_attention(out_a, lse_a.masked_fill(members[:, None] == 0, float("-inf")), out_b, lse_b)


ARMS = {"one launch": cascade.merge_members, "torch": torch_merge}
ENGINE_ARMS = {**{name: (merge, True) for name, merge in ARMS.items()},
               "cascade off": (cascade.merge_members, False)}  # (merge, cascade graphs used)


def kernel_rows() -> list:
    """Per row count: µs per call of each arm over LAYERS buffers in one graph, and their largest difference."""
    out = []
    for rows in (16, 64, 256):
        g = torch.Generator(device="cuda").manual_seed(rows)
        bufs = [(torch.randn(rows, HEADS, DIM, device="cuda", generator=g).bfloat16(),
                 torch.randn(HEADS, rows, device="cuda", generator=g).t() * 3,  # flash-attn 2's varlen lse, transposed
                 torch.randn(rows, HEADS, DIM, device="cuda", generator=g).bfloat16(),
                 torch.randn(rows, HEADS, device="cuda", generator=g) * 3,
                 (torch.rand(rows, device="cuda", generator=g) < 0.9).int()) for _ in range(LAYERS)]
        diff = float((ARMS["one launch"](*bufs[0]).float() - ARMS["torch"](*bufs[0]).float()).abs().max())
        row = {"rows": rows, "max_abs_diff": diff, "us": {}}
        for name, merge in ARMS.items():
            row["us"][name] = [graph_us([lambda b=b, m=merge: m(*b) for b in bufs]) for _ in range(3)]
        out.append(row)
        print(f"rows {rows:3d}: " + ", ".join(f"{n} {statistics.median(v):5.2f} µs" for n, v in row["us"].items())
              + f", max |diff| {diff:.4f}", flush=True)
    return out


@contextlib.contextmanager
def merge_as(merge):
    """cascade.merge_members is `merge` inside the block (CascadeDecode.forward looks it up when graphs capture)."""
    old, cascade.merge_members = cascade.merge_members, merge
    try:
        yield
    finally:
        cascade.merge_members = old


def shared_prefix_runs(llm, runs: int = 2) -> dict:
    """nanobench's shared-prefix workload (T = 0.6): a warm-up, then `runs` runs on an empty prefix cache, prompt ids
    redrawn per run as the harness does; output tok/s of each and the steps that replayed a cascade graph."""
    from nanobench.workloads import make_workload, redraw_ids
    from nanoserve import SamplingParams

    requests = make_workload("shared-prefix")
    def generate(reqs):
        params = [SamplingParams(temperature=0.6, max_tokens=r.max_tokens, ignore_eos=True) for r in reqs]
        llm.generate([{"prompt_token_ids": list(r.prompt_token_ids)} for r in reqs], params, use_tqdm=False)
        return sum(r.max_tokens for r in reqs)
    generate(requests[:8])
    out = {"tok_s": [], "cascade_steps": []}
    for run in range(runs):
        llm.reset_prefix_cache()
        reqs = requests if run == 0 else redraw_ids(requests, run)
        replays = llm.engine.executor.replays.get("cascade", 0)
        start = time.perf_counter()
        tokens = generate(reqs)
        out["tok_s"].append(tokens / (time.perf_counter() - start))
        out["cascade_steps"].append(llm.engine.executor.replays.get("cascade", 0) - replays)
    return out


def main():
    from nanoserve import LLM

    kernels = kernel_rows()
    model = random_qwen3_0_6b()
    engines = {name: [] for name in ENGINE_ARMS}
    for _ in range(int(os.environ.get("ROUNDS", 2))):
        for name, (merge, use_cascade) in ENGINE_ARMS.items():
            with merge_as(merge):
                llm = LLM(str(model), skip_tokenizer_init=True, max_model_len=4096, gpu_memory_utilization=0.8)
                runner = llm.engine.executor
                if not use_cascade:  # as chapter 13 section 7 does: plain decode takes every step
                    runner.variants = [v for v in runner.variants if v.name != "cascade"]
                result = shared_prefix_runs(llm)
                del runner
            llm.shutdown()
            del llm
            gc.collect()
            torch.cuda.empty_cache()
            engines[name].append(result)
            print(f"{name:10s} shared-prefix: " + " · ".join(f"{t:,.0f}" for t in result["tok_s"])
                  + f" tok/s, cascade steps {result['cascade_steps']}", flush=True)
    write_result(sys.argv[1], {"model": "random weights, Qwen3-0.6B shapes", "workload": "shared-prefix",
                               "engine": {"max_model_len": 4096, "gpu_memory_utilization": 0.8}},
                 kernel=kernels, engines=engines)
    print("\nshared-prefix tok/s, median of each engine's runs: " + ", ".join(
        f"{n} {statistics.median(t for r in rs for t in r['tok_s']):,.0f}" for n, rs in engines.items()))


if __name__ == "__main__":
    main()
