"""Chapter 19's long-context decode graphs (few lanes over long contexts on flash-attn 2's kernel), end to end.

Run from the repository root: python scripts/gpu/long_context_probe.py OUT_JSON
Engine decode TPOT with and without the variant, alternating, twice each: batch 1, 8, 32 after 128-token prompts
(no step qualifies: the plain decode graphs must be unchanged), and batch 1, 4, 8 after 2,000- and 3,000-token
prompts; with the replays each variant took.
"""
import gc
import statistics
import sys

import torch

from nanoserve import LLM
from nanoserve.attention import flash4
from probe_timing import tpot_ms, random_qwen3_0_6b, write_result  # this script's folder

CASES = [("short", 128, 256, 5, (1, 8, 32)), ("2,000", 2000, 128, 3, (1, 4, 8)), ("3,000", 3000, 128, 3, (1, 4, 8))]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/long_context.json"
    model = random_qwen3_0_6b()
    real = flash4.long_context_decode
    rows = {}
    for name in ("without", "with", "without, again", "with, again"):
        flash4.long_context_decode = real if name.startswith("with,") or name == "with" else (lambda *a: None)
        llm = LLM(str(model), flash4_compile="startup", max_model_len=4096)
        runner = llm.engine.executor
        rows[name] = {"variants": [v.name for v in runner.variants]}
        for label, prompt, out_len, runs, batches in CASES:
            for b in batches:
                rows[name][f"{label} b{b}"] = tpot_ms(llm, b, prompt_len=prompt, out_len=out_len, runs=runs)
        rows[name]["replays"] = dict(runner.replays)
        print(f"{name:16s} " + " ".join(f"{k} {statistics.median(v):.3f}" for k, v in rows[name].items()
                                        if isinstance(v, list) and isinstance(v[0], float)), rows[name]["replays"],
              flush=True)
        del llm, runner
        gc.collect()
        torch.cuda.empty_cache()
    flash4.long_context_decode = real
    config = {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
              "tpot": "(t(out_len tokens) - t(1 token)) / (out_len - 1), median of the runs",
              "cases": [dict(zip(("label", "prompt_len", "out_len", "runs", "batches"), c)) for c in CASES]}
    write_result(out, config, engine=rows)


if __name__ == "__main__":
    main()
