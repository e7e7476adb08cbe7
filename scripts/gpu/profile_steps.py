"""Where a step's GPU time goes on the H200: kernel tables of a long prefill and of batch-256 decode steps.

Run ON THE GPU MACHINE from the repository root (flash-attn importable):
    python scripts/gpu/profile_steps.py [--out DIR]
Prints, per phase, the wall time per step and the top kernels by total GPU time (CUPTI sees kernels inside
CUDA-graph replays too), and writes the tables with provenance as JSON to DIR/profile_steps_<tag>.json.
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from nanoserve import LLM, SamplingParams
from nanobench.provenance import collect_provenance, command_line, utc_now
from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config


def kernel_table(prof, top=30):
    """(name, calls, total ms) of the kernels that took the most GPU time, and the total."""
    rows = [(e.key, e.count, e.device_time_total / 1000) for e in prof.key_averages()
            if e.device_time_total > 0 and e.device_type.name == "CUDA"]
    rows.sort(key=lambda r: -r[2])
    return rows[:top], sum(r[2] for r in rows)


def profiled(llm, prompts, params) -> tuple:
    """(torch profile, wall s) of one generate call, the GPU drained before and after."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
    return prof, wall


def phase(llm, name, prompts, params, results):
    """Profile one generate call; print and keep its kernel table."""
    stats = llm.engine.stats
    steps = stats.num_steps
    prof, wall = profiled(llm, prompts, params)
    n = stats.num_steps - steps
    rows, total = kernel_table(prof)
    print(f"\n== {name}: {n} steps, {wall * 1000 / n:.2f} ms wall per step, GPU kernels {total / n:.2f} ms per step")
    for key, count, ms in rows:
        print(f"{ms / n:8.3f} ms/step {count // max(n, 1):6d}/step  {key[:90]}")
    results[name] = dict(steps=n, wall_ms_per_step=wall * 1000 / n, gpu_ms_per_step=total / n,
                         kernels=[dict(name=k, calls=c, total_ms=m) for k, c, m in rows])


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="h200", help="names the JSON: profile_steps_<tag>.json")
    args = parser.parse_args()
    import sys
    meta = dict(date=utc_now(), command=command_line(sys.argv), provenance=collect_provenance(),
                config=dict(model="random weights, exact Qwen3-0.6B shapes", max_model_len=4096,
                            gpu_memory_utilization=0.8, engine="defaults (graphs, fused kernels, async)"))
    ckpt = make_checkpoint_from_config(QWEN3_0_6B_CONFIG, Path(tempfile.mkdtemp()) / "q", with_tokenizer=False)
    llm = LLM(str(ckpt), skip_tokenizer_init=True, flash4_compile="startup", max_model_len=4096,
              gpu_memory_utilization=0.8)
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, 10000, (n,), generator=g).tolist()  # noqa: E731
    llm.generate([dict(prompt_token_ids=ids(64))] * 4, SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    results = {}
    long_prompts = [dict(prompt_token_ids=ids(2048)) for _ in range(16)]
    phase(llm, "prefill 16 x 2048 (8,192-token steps)", long_prompts, SamplingParams(temperature=0, max_tokens=1),
          results)
    decode_prompts = [dict(prompt_token_ids=ids(512)) for _ in range(256)]
    llm.generate(decode_prompts, SamplingParams(max_tokens=1), use_tqdm=False)  # their prefixes into the cache
    phase(llm, "decode batch 256, context 512-576 (prefix hits)", decode_prompts,
          SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), results)
    one = [dict(prompt_token_ids=ids(128))]
    phase(llm, "decode batch 1", one, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True), results)
    Path(args.out, f"profile_steps_{args.tag}.json").write_text(json.dumps(dict(meta, phases=results), indent=1))


if __name__ == "__main__":
    main()
