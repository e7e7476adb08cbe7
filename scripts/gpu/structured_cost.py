"""What constrained rows cost on the GPU: decode throughput of 64 requests with 0, 1, 8 or 64 of them constrained.

Run on the GPU machine (the kit: ../shared/gpu/README.md), after building a random-weight Qwen3-0.6B with tokenizer:
    python3 scripts/gpu/structured_cost.py --model /tmp/qwen3-0.6b --out /tmp/structured_cost.json
Every request has 128 prompt tokens and makes 128 tokens (ignore_eos); a constrained row uses the regex `[^\\x00]*`,
which allows almost every token, so the output length is the same and only the mechanism is measured (the mask each
step, the synchronous step, sampling outside the head graph). Prints a table and writes JSON with provenance.
"""
import argparse
import json
import platform
import sys
import time

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--requests", type=int, default=64)
    args = ap.parse_args(argv)
    from nanoserve import LLM, SamplingParams, StructuredOutputsParams, __version__

    llm = LLM(args.model, max_model_len=1024, gpu_memory_utilization=0.5)
    spec = StructuredOutputsParams(regex="[^\\x00]*")
    prompts = [{"prompt_token_ids": [(7 * i + j) % 10000 for j in range(128)]} for i in range(args.requests)]
    llm.generate(prompts[:4], SamplingParams(max_tokens=8, structured_outputs=spec), use_tqdm=False)  # warm-up
    rows = []
    for constrained in (0, 1, 8, args.requests):
        params = [SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True,
                                 structured_outputs=spec if i < constrained else None) for i in range(args.requests)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        rows.append({"constrained_rows": constrained, "seconds": seconds, "output_tokens": tokens,
                     "tok_s": tokens / seconds, "eager_steps": llm.engine.stats.eager_steps})
    base = rows[0]["tok_s"]
    print(f"{'constrained':>11s} {'seconds':>8s} {'tok/s':>9s} {'x none':>7s}")
    for r in rows:
        print(f"{r['constrained_rows']:>11d} {r['seconds']:8.2f} {r['tok_s']:9.0f} {r['tok_s'] / base:7.2f}")
    provenance = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "nanoserve": __version__,
                  "python": platform.python_version(), "command": " ".join(sys.argv),
                  "config": {"requests": args.requests, "prompt_tokens": 128, "output_tokens": 128,
                             "regex": spec.regex, "weights": "random weights, exact Qwen3-0.6B shapes"}}
    with open(args.out, "w") as f:
        json.dump({"provenance": provenance, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
