"""Helpers shared by the GPU probes: kernels replayed in a CUDA graph, samplers timed on Qwen3's logits, an engine's
decode time per token and workload throughput, the random Qwen3-0.6B checkpoint, and the result file with its
provenance."""
import statistics
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


QWEN3_VOCAB = 151936


def sampler_rows(arms: dict, reps: int = 1) -> list:
    """Samplers `arms` {name: fn(logits, temperature, greedy)} on bf16 logits of Qwen3's vocabulary at 1, 8, 64 and
    256 rows, T = 0.6: per row count, µs per call (`graph_us` over 4 logits buffers, arms in turn, `reps` times) and
    whether greedy rows equal argmax."""
    out = []
    for rows in (1, 8, 64, 256):
        logits = [torch.randn(rows, QWEN3_VOCAB, device="cuda").to(torch.bfloat16) * 3 for _ in range(4)]
        temps, greedy = torch.full((rows,), 0.6, device="cuda"), torch.zeros(rows, dtype=torch.int32, device="cuda")
        ones = torch.ones(rows, dtype=torch.int32, device="cuda")
        row = {"rows": rows, "us": {name: [] for name in arms},
               "greedy_equals_argmax": {name: torch.equal(fn(logits[0], temps, ones), logits[0].argmax(dim=1))
                                        for name, fn in arms.items()}}
        for _ in range(reps):
            for name, fn in arms.items():
                row["us"][name].append(graph_us([lambda x=x, fn=fn: fn(x, temps, greedy) for x in logits]))
        out.append(row)
        print(f"rows {rows:3d}: " + ", ".join(f"{n} {statistics.median(v):6.1f} µs" for n, v in row["us"].items())
              + f", greedy exact {all(row['greedy_equals_argmax'].values())}", flush=True)
    return out


def workload_tok_s(engine, requests, temperature: float) -> float:
    """Output tok/s of one generate call over nanobench `requests` on a nanobench engine (its own prepare and run)."""
    prepared = engine.prepare(requests, temperature)
    start = time.perf_counter()
    tokens = sum(engine.run(prepared))
    return tokens / (time.perf_counter() - start)


PROBE_ENGINE = {"skip_tokenizer_init": True, "max_model_len": 4096, "gpu_memory_utilization": 0.8}


def decode_prompts(count: int = 256, length: int = 592) -> list:
    """`count` prompts of `length` random token ids (seed 0): the cached prompts of a probe's decode steps."""
    g = torch.Generator().manual_seed(0)
    return [{"prompt_token_ids": torch.randint(0, 10000, (length,), generator=g).tolist()} for _ in range(count)]


def random_workload_tok_s(engine, runs: int = 2, temperature: float = 0.6) -> list:
    """nanobench's `random` workload on a nanobench engine: a warm-up on 8 requests, then `runs` runs, each on an empty
    prefix cache; output tok/s of each."""
    from nanobench.workloads import make_workload

    requests = make_workload("random")
    workload_tok_s(engine, requests[:8], temperature)
    out = []
    for _ in range(runs):
        engine.reset_prefix_cache()
        out.append(workload_tok_s(engine, requests, temperature))
    return out


PROMPT_LEN, OUT_LEN, RUNS = 128, 256, 5  # tpot_ms's defaults
TPOT_CONFIG = {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "prompt_len": PROMPT_LEN,
               "out_len": OUT_LEN, "runs": RUNS, "tpot": f"(t({OUT_LEN} tokens) - t(1 token)) / {OUT_LEN - 1}"}


def tpot_ms(llm, batch: int, prompt_len: int = PROMPT_LEN, out_len: int = OUT_LEN, runs: int = RUNS) -> list:
    """Decode ms per token, `runs` times: (time for out_len tokens - time for 1 token) / (out_len - 1)."""
    prompts = [{"prompt_token_ids": [(7 * i + 13 * j) % 30000 + 100 for j in range(prompt_len)]} for i in range(batch)]
    return decode_ms(llm, prompts, out_len, runs)


def decode_ms(llm, prompts: list, out_len: int, runs: int, temperature: float = 0.0) -> list:
    """tpot_ms's measurement for given prompts: after a warm-up that caches their prefixes, `runs` times
    (time for out_len tokens - time for 1 token) / (out_len - 1), in ms."""
    from nanoserve import SamplingParams

    one = SamplingParams(max_tokens=1, ignore_eos=True, temperature=temperature)
    many = SamplingParams(max_tokens=out_len, ignore_eos=True, temperature=temperature)
    llm.generate(prompts, many, use_tqdm=False)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        llm.generate(prompts, one, use_tqdm=False)
        t1 = time.perf_counter()
        llm.generate(prompts, many, use_tqdm=False)
        out.append(((time.perf_counter() - t1) - (t1 - t0)) / (out_len - 1) * 1000)
    return out


def engine_row(llm, name: str, prompts: list, **notes) -> tuple:
    """(row, greedy tokens) of one engine in a probe: its attention classes and backend, TPOT at batch 1, 8 and
    32 (printed as they come), and 64 greedy tokens for each of `prompts` (lists of token ids)."""

    from nanoserve import SamplingParams

    kinds = {type(m).__name__ for m in llm.engine.executor.runner.model.modules()}
    row = {"attention_class": sorted(k for k in kinds if "Attention" in k), **notes,
           "backend": llm.config.attention_backend_class.name}
    for batch in (1, 8, 32):
        row[batch] = tpot_ms(llm, batch)
        print(f"{name:34s} batch {batch:2d}: TPOT {statistics.median(row[batch]):.3f} ms", flush=True)
    outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts],
                           SamplingParams(max_tokens=64, temperature=0.0), use_tqdm=False)
    return row, [o.outputs[0].token_ids for o in outputs]


def compare_engines(model: str, runs: list, prompts: list) -> tuple:
    """({name: engine_row}, {name: greedy tokens}) for `runs` of (name, swap, context, notes): a fresh LLM each, built
    while chapter 10's `fuse_model` is `swap` and `context` (a context manager) is entered."""
    import gc

    import nanoserve.kernels.fused as fused
    from nanoserve import LLM

    real, rows, tokens = fused.fuse_model, {}, {}
    try:
        for name, swap, context, notes in runs:
            fused.fuse_model = swap  # build_runner looks it up when it builds the model
            with context:
                llm = LLM(str(model), flash4_compile="startup", max_model_len=4096)
                rows[name], tokens[name] = engine_row(llm, name, prompts, **notes)
            del llm
            gc.collect()
            torch.cuda.empty_cache()
    finally:
        fused.fuse_model = real
    return rows, tokens


def tokens_equal_to(tokens: dict, base: str) -> dict:
    """{engine: how many of its greedy tokens equal engine `base`'s, position by position} for compare_engines'
    tokens."""
    return {name: sum(a == b for x, y in zip(out, tokens[base]) for a, b in zip(x, y)) for name, out in tokens.items()}


def random_qwen3_0_6b(path: str = "/tmp/qwen3-0.6b-random") -> str:
    """A random-weight checkpoint of Qwen3-0.6B's exact shapes, with the tokenizer built on the CPU machine."""
    import shutil

    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config

    model = make_checkpoint_from_config(QWEN3_0_6B_CONFIG, path, with_tokenizer=False)
    shutil.copytree(".gpu/tokenizer", model, dirs_exist_ok=True)  # no network on the GPU machine
    return model


def fresh_process(code: str, *args, caches: str, timeout: float) -> dict:
    """Run `code` in a new Python process (argv: the spawn time, then `args`) on kernel caches under `caches` (XDG and
    Triton, flash-attn-4's own setting dropped); the JSON its last line prints, or {"error": its stderr's tail}."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASH_ATTENTION_CUTE_DSL_CACHE")}
    env.update(XDG_CACHE_HOME=f"{caches}/xdg", TRITON_CACHE_DIR=f"{caches}/triton")
    done = subprocess.run([sys.executable, "-c", code, str(time.time()), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_result(path: str, config: dict, **sections) -> None:
    """`sections` as JSON at `path`, after a provenance block (machine, versions, date, this command, `config`)."""
    import json
    import shlex
    import sys

    from nanobench.provenance import collect_provenance, utc_now

    provenance = {**collect_provenance(), "date": utc_now(), "command": shlex.join(["python", *sys.argv]),
                  "config": config}
    with open(path, "w") as f:
        json.dump({"provenance": provenance, **sections}, f, indent=1)


def print_tpot_table(rows: dict, note: str, batches=(1, 8, 32)) -> None:
    """One line per engine configuration in `rows`: its median TPOT at each batch size, then its entry `note`."""
    import statistics

    print("\nengine TPOT, median ms      " + " ".join(f"batch {b:<2}" for b in batches))
    for name, row in rows.items():
        if isinstance(row, dict):
            print(f"{name:26s} " + " ".join(f"{statistics.median(row[b]):8.3f}" for b in batches), row[note])
