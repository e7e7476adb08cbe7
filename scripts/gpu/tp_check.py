"""Tensor parallelism on two GPUs: TP=2 agrees with TP=1, and its throughput and per-GPU memory.

Run on a machine with 2 CUDA GPUs, from the repository root:
    python scripts/gpu/tp_check.py [--config .gpu/config.json] [--requests 64] [--stage all|agreement]
Builds a random-weight checkpoint with the exact Qwen3-0.6B shapes (weights are random, so only
shapes, speed and agreement matter). Agreement is checked twice: float32 + torch attention, eager,
where TP=2 must equal TP=1 token for token; and with the GPU defaults (bf16, flash-attn, CUDA graphs),
where bf16 rounding differs between the two, so both are checked teacher-forced against transformers
(each token its argmax or within 2% of the logit range of it). Prints a short table and writes
tp_check.json to $OUT (or .).

Every stage prints a flushed progress line before and after it. A stage that runs longer than
--stage-timeout seconds dumps every thread's stack to stderr and exits (faulthandler) instead of
hanging silently; the tensor-parallel workers get the same per call through NANOSERVE_TP_HANG_DUMP_S.
"""
import argparse
import faulthandler
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from nanoserve.engine.engine import LLMEngine  # noqa: E402
from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config  # noqa: E402
from nanoserve.parallel.workers import HANG_DUMP_ENV  # noqa: E402
from nanoserve.sampling import SamplingParams  # noqa: E402

T0 = time.perf_counter()


class Stage:
    """A progress line (flushed) before and after a block, and a faulthandler dump + exit if it hangs."""

    timeout_s = 90.0

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        print(f"[{time.perf_counter() - T0:7.1f}s] start: {self.name}", flush=True)
        faulthandler.dump_traceback_later(self.timeout_s, exit=True, file=sys.stderr)
        self.start = time.perf_counter()
        return self

    def __exit__(self, exc_type, *_):
        faulthandler.cancel_dump_traceback_later()
        status = "done" if exc_type is None else f"FAILED ({exc_type.__name__})"
        print(f"[{time.perf_counter() - T0:7.1f}s] {status}: {self.name} "
              f"({time.perf_counter() - self.start:.1f}s)", flush=True)
        return False


def make_engine(bf16, tp: int, label: str, **kwargs) -> LLMEngine:
    """An engine, built inside a Stage (loading, workers, profiling, graph capture all happen here)."""
    with Stage(f"{label}: start engine tp={tp} (load, workers, KV profiling, CUDA-graph capture) {kwargs}"):
        return LLMEngine.from_args(str(bf16), tensor_parallel_size=tp, skip_tokenizer_init=True, **kwargs)


def gpu_memory_used_mib() -> list:
    """Memory in use on every GPU (all processes), from nvidia-smi when present."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return [int(x) for x in out.split()]
    except Exception:
        return [(t - f) // 2**20 for f, t in (torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count()))]


def run(engine: LLMEngine, prompts: list, params: SamplingParams) -> tuple:
    """(token ids per prompt, output tokens, seconds) of one batch through the engine."""
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
    tokens = {}
    start = time.perf_counter()
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens.setdefault(out.request_id, []).extend(out.outputs[0].token_ids)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    ids = [tokens[str(i)] for i in range(len(prompts))]
    return ids, sum(len(t) for t in ids), seconds


def count_replays(engine: LLMEngine) -> dict:
    """Count rank 0's CUDA-graph replays from now on (the proof that decode steps ran as graphs)."""
    runner = getattr(engine.executor, "runner", engine.executor)  # TP executor wraps rank 0's runner
    graphs, counter = getattr(runner, "graphs", None), {"replays": 0}
    for name in ("replay", "replay_sampled"):
        original = getattr(graphs, name, None)
        if original is not None:
            def counted(*args, _original=original, **kwargs):
                counter["replays"] += 1
                return _original(*args, **kwargs)
            setattr(graphs, name, counted)
    counter["buckets"] = sorted(graphs.graphs) if graphs is not None else []
    return counter


def score_rows(ref, prompts: list, rows: list, margin: float = 0.02) -> dict:
    """Teacher-force each prompt + generated row through `ref`: is each token its argmax, or within a margin?"""
    exact = within = total = 0
    for prompt, gen in zip(prompts, rows):
        ids = torch.tensor([prompt + gen], device="cuda")
        with torch.no_grad():
            logits = ref(ids, attention_mask=torch.ones_like(ids)).logits[0, len(prompt) - 1:-1].float()
        chosen = logits.gather(1, torch.tensor(gen, device="cuda")[:, None])[:, 0]
        best = logits.max(-1).values
        exact += int((chosen == best).sum())
        within += int((chosen >= best - margin * (best - logits.min(-1).values)).sum())
        total += len(gen)
    return dict(argmax=exact, within_margin=within, tokens=total)


def teacher_forced(checkpoint: Path, prompts: list, generated: dict, margin: float = 0.02) -> dict:
    """transformers (bf16, cuda:0) as the oracle for each {key: rows} set; the reference is loaded once."""
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.bfloat16).cuda().eval()
    report = {key: score_rows(ref, prompts, rows, margin) for key, rows in generated.items()}
    del ref
    torch.cuda.empty_cache()
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="config.json of the model shape (default: Qwen3-0.6B)")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--check-prompts", type=int, default=4)
    ap.add_argument("--check-tokens", type=int, default=32)
    ap.add_argument("--stage", choices=("all", "agreement"), default="all",
                    help="agreement: only the float32 TP=1 vs TP=2 check (eager, torch attention)")
    ap.add_argument("--stage-timeout", type=float, default=90.0,
                    help="seconds one stage (or one worker call) may run before stacks are dumped and it exits")
    a = ap.parse_args()
    Stage.timeout_s = a.stage_timeout
    os.environ[HANG_DUMP_ENV] = str(a.stage_timeout)  # spawned workers inherit it and arm their own dumps
    faulthandler.enable(file=sys.stderr, all_threads=True)  # fatal signals dump stacks too
    if torch.cuda.device_count() < 2:
        print("needs 2 CUDA GPUs")
        return 2
    config = json.loads(Path(a.config).read_text()) if a.config else QWEN3_0_6B_CONFIG
    out_dir = Path(os.environ.get("OUT", "."))
    rng = random.Random(0)
    check_prompts = [[rng.randrange(10000) for _ in range(64)] for _ in range(a.check_prompts)]
    bench_prompts = [[rng.randrange(10000) for _ in range(a.prompt_len)] for _ in range(a.requests)]
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "command": " ".join(sys.argv),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "model": "random weights, exact Qwen3-0.6B shapes",
              "workload": dict(requests=a.requests, prompt_len=a.prompt_len, max_tokens=a.max_tokens,
                               temperature=0, ignore_eos=True), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        with Stage("build random-weight checkpoint"):
            bf16 = make_checkpoint_from_config(config, Path(tmp) / "bf16", dtype=torch.bfloat16,
                                               with_tokenizer=False)
        # agreement: float32 + torch attention, eager, so TP=1 and TP=2 differ only in summation order
        check = {}
        for tp in (1, 2):
            engine = make_engine(bf16, tp, "agreement", dtype="float32", attention_backend="torch",
                                 enforce_eager=True, max_model_len=1024, num_kv_blocks=256,
                                 enable_prefix_caching=False)
            with Stage(f"agreement: generate tp={tp} ({len(check_prompts)} prompts x {a.check_tokens} tokens)"):
                check[tp], _, _ = run(engine, check_prompts,
                                      SamplingParams(temperature=0, max_tokens=a.check_tokens, ignore_eos=True))
            with Stage(f"agreement: shutdown tp={tp}"):
                engine.shutdown()
                del engine
        same = sum(x == y for p1, p2 in zip(check[1], check[2]) for x, y in zip(p1, p2))
        total = sum(len(p) for p in check[1])
        first_div = [next((i for i, (x, y) in enumerate(zip(p1, p2)) if x != y), None)
                     for p1, p2 in zip(check[1], check[2])]
        result["agreement_fp32"] = dict(equal_tokens=same, tokens=total, identical=check[1] == check[2],
                                        first_divergence=first_div)
        ag = result["agreement_fp32"]
        print(f"agreement (float32, greedy): {ag['equal_tokens']}/{ag['tokens']} tokens equal, "
              f"identical={ag['identical']}, first divergence per prompt={ag['first_divergence']}", flush=True)
        # throughput and memory: the engine's defaults on GPU (bf16, flash-attn when present, CUDA graphs)
        graph_tokens = {}
        for tp in (1, 2) if a.stage == "all" else ():
            torch.cuda.empty_cache()
            engine = make_engine(bf16, tp, "throughput", max_model_len=2048, gpu_memory_utilization=0.85)
            replays = count_replays(engine)
            params = SamplingParams(temperature=0, max_tokens=a.max_tokens, ignore_eos=True)
            with Stage(f"graphs: greedy check prompts tp={tp} (bf16, flash, CUDA graphs; also the warm-up)"):
                graph_tokens[tp], _, _ = run(engine, check_prompts,
                                             SamplingParams(temperature=0, max_tokens=a.check_tokens, ignore_eos=True))
            with Stage(f"throughput: generate tp={tp} ({a.requests} x {a.prompt_len}+{a.max_tokens} tokens)"):
                _, n_out, seconds = run(engine, bench_prompts, params)
            weights = sum(p.numel() * p.element_size() for p in
                          {id(p): p for p in engine.executor.model.parameters()}.values())
            result["runs"][f"tp{tp}"] = dict(
                output_tokens=n_out, seconds=round(seconds, 3), output_tok_per_s=round(n_out / seconds, 1),
                weight_mib_per_gpu=round(weights / 2**20, 1), num_kv_blocks=engine.num_kv_blocks,
                block_size=engine.config.block_size, attention_backend=engine.config.attention_backend,
                graph_buckets=len(replays["buckets"]), graph_replays=replays["replays"],
                gpu_memory_used_mib=gpu_memory_used_mib()[:tp])
            with Stage(f"throughput: shutdown tp={tp}"):
                engine.shutdown()
                del engine
        if graph_tokens:
            with Stage("graphs: teacher-forced check against transformers (bf16)"):
                oracle = teacher_forced(bf16, check_prompts, {f"tp{tp}": rows for tp, rows in graph_tokens.items()})
            same = sum(x == y for p1, p2 in zip(graph_tokens[1], graph_tokens[2]) for x, y in zip(p1, p2))
            total = sum(len(p) for p in graph_tokens[1])
            result["agreement_bf16_graphs"] = dict(equal_tokens=same, tokens=total, oracle=oracle)
            print(f"agreement (bf16, flash, CUDA graphs, greedy): TP=2 equals TP=1 on {same}/{total} tokens; "
                  + "; ".join(f"{k}: {v['within_margin']}/{v['tokens']} within 2% of transformers' argmax "
                              f"({v['argmax']} exactly it)" for k, v in oracle.items()), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    if a.stage == "agreement":
        (out_dir / "tp_check_agreement.json").write_text(json.dumps(result, indent=2))
        return 0
    print(f"{'run':<5} {'tok/s':>9} {'weights MiB/GPU':>16} {'KV blocks':>10} {'graph replays':>14} "
          f"{'GPU MiB used':>18}")
    for name, r in result["runs"].items():
        print(f"{name:<5} {r['output_tok_per_s']:>9.0f} {r['weight_mib_per_gpu']:>16.0f} "
              f"{r['num_kv_blocks']:>10} {r['graph_replays']:>14} {str(r['gpu_memory_used_mib']):>18}")
    r1, r2 = result["runs"]["tp1"], result["runs"]["tp2"]
    print(f"TP=2 / TP=1 throughput: {r2['output_tok_per_s'] / r1['output_tok_per_s']:.2f}x; "
          f"weights per GPU: {r2['weight_mib_per_gpu'] / r1['weight_mib_per_gpu']:.2f}x")
    (out_dir / "tp_check.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
