"""Where a speculative step's time goes on one GPU: wall time per engine step for plain decode (one step ahead and
synchronous) and for verify steps (verify-varlen: SpecVerify's varlen kernel; verify and verify-k8: the kvcache-kernel
experiment, KvcacheLanes), at batch 1 and 8, on random weights with SmolLM2-135M's shapes, with a host/GPU breakdown
of every synchronous step; prints a table and writes JSON with provenance.

    python3 scripts/gpu/spec_step_profile.py --out DIR

Verify steps are forced: the proposer always proposes k tokens (acceptance does not change a step's cost)."""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

SMOLLM2_SHAPES = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                  "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
                  "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
                  "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
K = 4


class KvcacheLanes:
    """The experiment: verify lanes (every lane 1 + k queries) through flash-attn's kvcache kernel, q viewed
    [lanes, queries, heads, dim] and causal at the end of each cache, instead of the varlen kernel SpecVerify uses."""

    def __init__(self, backend, queries: int):
        self.backend, self.queries = backend, queries
        self.name, self.block_size_multiple = backend.name, backend.block_size_multiple

    def forward(self, q, k, v, layer_idx, batch):
        """Store this step's k/v, then attend each lane's queries to its cache."""
        from nanoserve.attention.flash import flash_functions

        k_cache, v_cache = batch.kv_caches[layer_idx]
        self.backend.store(k, v, k_cache, v_cache, batch.slot_mapping)
        lanes = q.reshape(-1, self.queries, *q.shape[1:])
        return flash_functions()[1](lanes, k_cache, v_cache, batch.context_lens, batch.block_tables)[0].view(q.shape)


def use_kvcache_kernel() -> None:
    """Wrap every SpecVerify's flash backend in KvcacheLanes (before the engine captures its graphs)."""
    from nanoserve.attention.spec_verify import SpecVerify

    plain = SpecVerify.__init__

    def init(self, backend, *args):
        plain(self, backend, *args)
        if self.backend.name == "flash":
            self.backend = KvcacheLanes(self.backend, self.queries)
    SpecVerify.__init__ = init


def build(model_dir: str, mode: str):
    """An LLM for one configuration (mode: off, off-sync, verify-varlen, verify, verify-k8)."""
    from nanoserve import LLM

    spec = None
    if mode.startswith("verify"):
        spec = {"method": "ngram", "num_speculative_tokens": 8 if "k8" in mode else K,
                "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    extra = {"async_scheduling": False} if mode == "off-sync" else {}
    if mode in ("verify", "verify-k8"):
        use_kvcache_kernel()
    llm = LLM(model_dir, dtype="bfloat16", flash4_compile="startup", max_model_len=2048, gpu_memory_utilization=0.3,
              seed=0, skip_tokenizer_init=True, speculative_config=spec, **extra)
    core = llm.llm_engine.core
    if spec:  # always a whole proposal: every step a verify step
        k = spec["num_speculative_tokens"]
        core.proposer.propose = lambda ids: [int(ids[-1])] * k
    return llm, core


def time_steps(llm, core, batch: int, tokens: int, runs: int) -> dict:
    """Median (and spread) wall time per engine step and per output token while decoding `tokens` tokens."""
    from nanoserve import SamplingParams

    prompts = [{"prompt_token_ids": list(range(100 + i, 400 + i))} for i in range(batch)]
    steps = {"n": 0}
    step = core.step

    def counted():
        steps["n"] += 1
        return step()
    core.step = counted
    per_step, per_token = [], []
    for run in range(runs + 1):
        params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
        llm.generate(prompts, params, use_tqdm=False)
        steps["n"] = 0
        start = time.perf_counter()
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True),
                            use_tqdm=False)
        wall = time.perf_counter() - start
        if run:  # the first is a warm-up
            per_step.append(1e3 * wall / steps["n"])
            per_token.append(1e3 * wall / sum(len(o.outputs[0].token_ids) for o in outs) * batch)
    core.step = step
    return {"tokens": [o.outputs[0].token_ids for o in outs], "step_ms": statistics.median(per_step), "step_ms_min": min(per_step), "step_ms_max": max(per_step),
            "tpot_ms": statistics.median(per_token), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/spec_profile")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--modes", default="off,off-sync,verify-varlen,verify,verify-k8")
    parser.add_argument("--layers", type=int, default=30, help="fewer for a CPU smoke run")
    args = parser.parse_args()
    import torch

    from nanoserve.model.tiny import make_checkpoint_from_config

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = make_checkpoint_from_config(dict(SMOLLM2_SHAPES, num_hidden_layers=args.layers), "/tmp/smollm2-shapes", with_tokenizer=False)
    rows = []
    for mode in args.modes.split(","):
        result = subprocess.run([sys.executable, __file__, "--worker", mode, str(model_dir), str(args.runs),
                                 str(args.tokens)], capture_output=True, text=True, timeout=300)
        lines = [l for l in result.stdout.splitlines() if l.startswith("{")]
        if result.returncode or not lines:
            print(f"{mode}: failed\n{result.stderr[-2000:]}", flush=True)
            continue
        rows += [json.loads(l) for l in lines]
    from nanobench.provenance import git_commit  # the stated commit, else the checkout's (with "-dirty")

    commit = git_commit()
    reference = {r["batch"]: r["tokens"] for r in rows if r["mode"] == "off"}
    for r in rows:  # greedy tokens equal to plain decoding's (random weights: near-ties are rare but possible)
        r["same_tokens_as_off"] = sum(a == b for a, b in zip(r.pop("tokens"), reference.get(r["batch"], [])))
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    provenance = {"gpu": gpu, "torch": torch.__version__,
                  "python": platform.python_version(), "nanoserve_commit": commit or "unknown",
                  "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]), "date": time.strftime("%Y-%m-%d"),
                  "config": {"model": "random weights, SmolLM2-135M shapes", "dtype": "bfloat16",
                             "prompt_tokens": 300, "max_tokens": args.tokens}}
    (out / "spec_step_profile_h200.json").write_text(json.dumps({"provenance": provenance, "rows": rows}, indent=1))
    print(f"{'mode':<16}{'batch':>6}{'ms/step':>10}{'spread':>16}{'ms/token':>10}{'same':>6}")
    for r in rows:
        print(f"{r['mode']:<16}{r['batch']:>6}{r['step_ms']:>10.3f}   {r['step_ms_min']:.3f}-{r['step_ms_max']:.3f}"
              f"{r['tpot_ms']:>10.3f}{r['same_tokens_as_off']:>6}")
    for r in rows:
        if "breakdown_us" in r:
            print(r["mode"], r["batch"], "us per step:", r["breakdown_us"])


def breakdown(llm, core) -> dict:
    """Wrap the engine step, the core step and the executor (launch, then wait) with timers: microseconds per step."""
    import torch

    spent = {"engine_step": 0.0, "core_step": 0.0, "run_launch": 0.0, "gpu_wait": 0.0, "steps": 0}
    engine, run, step, engine_step = llm.llm_engine, core.executor.run, core.step, llm.llm_engine.step

    def timed(key, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            out = fn(*a, **k)
            spent[key] += time.perf_counter() - t
            return out
        return wrapper

    def run_then_wait(*a, **k):
        t = time.perf_counter()
        out = run(*a, **k)
        t2 = time.perf_counter()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        spent["run_launch"] += t2 - t
        spent["gpu_wait"] += time.perf_counter() - t2
        spent["steps"] += 1
        return out
    core.executor.run, core.step, engine.step = run_then_wait, timed("core_step", step), timed("engine_step", engine_step)
    return spent


def worker(mode: str, model_dir: str, runs: int, tokens: int) -> None:
    """One configuration in this process: a JSON row per batch size on stdout."""
    llm, core = build(model_dir, mode)
    for batch in (1, 8):
        row = time_steps(llm, core, batch, tokens, runs)
        if mode != "off":  # where a synchronous step's time goes (a run of its own)
            saved = core.executor.run, core.step, llm.llm_engine.step
            spent = breakdown(llm, core)
            time_steps(llm, core, batch, tokens, 1)
            core.executor.run, core.step, llm.llm_engine.step = saved
            n = max(spent.pop("steps"), 1)
            us = {k: round(1e6 * v / n) for k, v in spent.items()}
            us["host_in_core"] = us["core_step"] - us["run_launch"] - us["gpu_wait"]
            us["output_processing"] = us["engine_step"] - us["core_step"]
            row["breakdown_us"] = us
        replays = dict(getattr(core.executor, "replays", {}))
        print(json.dumps(dict(row, mode=mode, batch=batch, replays=replays)), flush=True)
    llm.shutdown()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
