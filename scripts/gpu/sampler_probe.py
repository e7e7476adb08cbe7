"""Chapter 10's one-pass sampler against chapter 09's graph_sample: the kernels alone, then the whole engine.

Run ON THE GPU MACHINE from the repository root (flash-attn and Triton importable):
    python scripts/gpu/sampler_probe.py [--out DIR] [--tag h100]
1. kernels: both samplers on bf16 logits of Qwen3's vocabulary at 1, 8, 64 and 256 rows, T = 0.6, in a CUDA graph of
   calls over 4 logits buffers, µs per call; greedy rows checked equal to argmax;
2. engine: an LLM whose head graphs sample with graph_sample ("graph_sample") or with sample_rows ("one kernel"),
   built in turn (A B A B), each timing a decode step at 256 lanes (contexts 592-656) and the `random` workload
   (random weights, Qwen3-0.6B shapes, T = 0.6, two runs).
Writes sampler_<tag>.json with provenance and prints a short table last.
"""
import argparse
import gc
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_timing import (PROBE_ENGINE, QWEN3_VOCAB, decode_ms, decode_prompts,  # noqa: E402  (this folder)
                          random_workload_tok_s, sampler_rows)


def kernel_rows(sample_rows, graph_sample) -> list:
    """Both samplers, one timing each; rows in the shape chapter 10 reads."""
    timed = sampler_rows({"graph_sample": lambda x, t, g: graph_sample(x, t, g, None), "one kernel": sample_rows})
    return [{"rows": r["rows"], "greedy_equals_argmax": r["greedy_equals_argmax"]["one kernel"],
             "graph_sample_us": r["us"]["graph_sample"][0], "one_kernel_us": r["us"]["one kernel"][0],
             "bf16_read_floor_us": r["rows"] * QWEN3_VOCAB * 2 / 3.0e12 * 1e6}  # at 3 TB/s, for scale
            for r in timed]


def engine_arm(model: str, name: str, sampler) -> dict:
    """Build an LLM whose head graphs sample with `sampler`; a decode step at 256 lanes and the random workload."""
    import nanoserve.kernels.sampling as sampling
    from nanobench.engines import make_engine

    real = sampling.sample_rows
    sampling.sample_rows = sampler  # build_executor imports it from the module while it builds
    try:
        engine = make_engine("nanoserve", model, PROBE_ENGINE)
    finally:
        sampling.sample_rows = real
    llm = engine.llm
    assert llm.engine.executor.head_sampler is sampler
    steps = decode_ms(llm, decode_prompts(), 65, runs=3, temperature=0.6)
    tok_s = random_workload_tok_s(engine)
    llm.shutdown()
    del llm, engine
    gc.collect()
    torch.cuda.empty_cache()
    print(f"{name:>12}: decode step at 256 lanes {statistics.median(steps):.3f} ms; random "
          + " ".join(f"{t:,.0f}" for t in tok_s) + " tok/s", flush=True)
    return {"arm": name, "decode_ms_256": steps, "random_tok_s": tok_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="h200")
    args = parser.parse_args()
    from nanobench.provenance import collect_provenance, command_line, utc_now
    from nanoserve.engine.cuda_graphs import graph_sample
    from nanoserve.kernels.sampling import sample_rows
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config

    torch.manual_seed(0)
    kernels = kernel_rows(sample_rows, graph_sample)
    model = str(make_checkpoint_from_config(QWEN3_0_6B_CONFIG, Path(tempfile.mkdtemp()) / "q", with_tokenizer=False))
    arms = [engine_arm(model, name, fn) for name, fn in
            [("graph_sample", graph_sample), ("one kernel", sample_rows)] * 2]
    result = {"date": utc_now(), "command": command_line(sys.argv), "provenance": collect_provenance(),
              "config": {"model": "random weights, exact Qwen3-0.6B shapes", "temperature": 0.6, "vocab": QWEN3_VOCAB,
                         "kernels": "a CUDA graph of one call per logits buffer (4), replayed 20 times",
                         "engine": "defaults, gpu_memory_utilization 0.8, arms built in turn A B A B",
                         "decode_step": "256 cached prompts of 592 tokens: (t(65 tokens) - t(1 token)) / 64, 3 times",
                         "random": "nanobench's random workload (256 requests), 2 runs after a warm-up"},
              "kernels": kernels, "engine": arms}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"sampler_{args.tag}.json").write_text(json.dumps(result, indent=1))
    print("\nrows | graph_sample µs | one kernel µs")
    for r in kernels:
        print(f"{r['rows']:4d} | {r['graph_sample_us']:15.1f} | {r['one_kernel_us']:13.1f}")
    print("arm | decode ms/step at 256 lanes (median of 3) | random tok/s")
    for a in arms:
        print(f"{a['arm']:>12} | {statistics.median(a['decode_ms_256']):.3f} | "
              + " ".join(f"{t:,.0f}" for t in a["random_tok_s"]))


if __name__ == "__main__":
    main()
