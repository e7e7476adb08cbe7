"""Where nanoserve's start-up goes: phase times of one `LLM(...)` in a fresh process, written as JSON.

Run ON THE GPU MACHINE with the tree under test first on PYTHONPATH (this script imports whichever nanoserve
that finds, so one copy of it profiles an older tree too). TRITON_CACHE_DIR decides cold (an empty folder) or
warm (the folder of an earlier run); NANOBENCH_LAUNCHED_AT (unix time set just before python started) adds the
interpreter's own start.
  NANOBENCH_LAUNCHED_AT=$(date +%s.%N) TRITON_CACHE_DIR=/tmp/tc PYTHONPATH=/tmp/site:$TREE \
    python3 scripts/gpu/startup_profile.py --model /tmp/qwen3-0.6b --out /tmp/startup.json
"""
import argparse
import functools
import importlib
import json
import os
import sys
import time

START = time.time()
LAUNCHED = float(os.environ.get("NANOBENCH_LAUNCHED_AT") or START)

# (module, attribute, label): functions and methods whose time is summed (nested ones overlap their callers)
PHASES = [("nanoserve.engine.model_runner", "ModelRunner.__init__", "model runner (weights, rotary tables)"),
          ("nanoserve.kernels.fused", "fuse_model", "fuse_model (swap in Triton layers)"),
          ("nanoserve.engine.graph_runner", "GraphRunner.profile_num_kv_blocks", "profile run, via the graph runner"),
          ("nanoserve.engine.model_runner", "ModelRunner.profile_num_kv_blocks", "profile run (KV sizing)"),
          ("nanoserve.engine.model_runner", "ModelRunner.init_kv_cache", "KV cache allocation"),
          ("nanoserve.engine.graph_runner", "GraphRunner._capture", "graph capture (all)"),
          ("nanoserve.engine.graph_runner", "capture_graph", "capture_graph calls"),
          ("nanoserve.engine.kv_profile", "dummy_step", "profile run's step (forward + sampling)"),
          ("nanoserve.engine.model_runner", "ModelRunner.forward", "eager forwards (profile run, warm-ups)"),
          ("nanoserve.sampler", "Sampler.__call__", "eager sampler calls"),
          ("nanoserve.engine.model_runner", "load_weights", "load_weights (checkpoint -> GPU)"),
          ("nanoserve.engine.engine", "make_engine_core", "engine core (runner, KV cache, graphs)"),
          ("nanoserve.engine.engine", "load_engine_tokenizer", "tokenizer (load_engine_tokenizer)"),
          ("nanoserve.llm", "LLM.__init__", "LLM() in all")]


def patch(times: dict, module_name: str, dotted: str, label: str) -> bool:
    """Wrap module.dotted so that its wall time (after a CUDA sync) and calls add up under `label`."""
    import torch

    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        return False
    *path, name = dotted.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    fn = getattr(owner, name, None) if owner is not None else None
    if fn is None:
        return False

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            entry = times.setdefault(label, {"s": 0.0, "calls": 0})
            entry["s"] += time.perf_counter() - start
            entry["calls"] += 1

    setattr(owner, name, timed)
    return True


def warm_up_first_only() -> None:
    """Make capture_graph skip its warm-up run after the first graph (an experiment: is per-graph warm-up needed?)."""
    from nanoserve.engine import cuda_graphs, graph_runner

    real, captured = cuda_graphs.capture_graph, []

    def capture_graph(fn, pool, generator=None):
        """The engine's capture_graph; after the first graph, its warm-up call of `fn` does nothing."""
        if not captured:
            captured.append(True)
            return real(fn, pool, generator)
        warm_up = [True]

        def skip_warm_up():
            if warm_up:
                warm_up.pop()  # the engine's warm-up call: skipped
            else:
                fn()

        return real(skip_warm_up, pool, generator)

    cuda_graphs.capture_graph = graph_runner.capture_graph = capture_graph


def tokenizer_first() -> None:
    """Make LLMEngine load the tokenizer before the core instead of on a thread beside it (an experiment)."""
    from concurrent.futures import Executor, Future

    from nanoserve.engine import engine

    class InOrder(Executor):
        """An executor that runs each submitted call at once, in the caller's thread."""

        def __init__(self, *args):
            pass

        def submit(self, fn, *args):
            done = Future()
            try:
                done.set_result(fn(*args))
            except Exception as err:  # noqa: BLE001  the engine reads it from .result(), as from a thread
                done.set_exception(err)
            return done

    engine.ThreadPoolExecutor = InOrder


def cache_entries(path) -> int | None:
    """Compiled kernels in a Triton cache folder (one sub-folder each), None when unknown."""
    return len(os.listdir(path)) if path and os.path.isdir(path) else None


def main() -> None:
    """Build one LLM, print and save its phase table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--engine-arg", action="append", default=[], metavar="KEY=JSON",
                        help="an LLM keyword argument, e.g. skip_tokenizer_init=true (repeatable)")
    parser.add_argument("--warm-up", choices=("every", "first"), default="every",
                        help="capture's warm-up run: before every graph (the engine's way) or before the first only")
    parser.add_argument("--tokenizer-first", action="store_true",
                        help="load the tokenizer before the engine core, not on a thread beside it")
    parser.add_argument("--pre-import", default="", metavar="MODULES",
                        help="comma-separated modules imported (and timed) before LLM(), e.g. triton,flash_attn")
    args = parser.parse_args()
    engine_args = {key: json.loads(value) for key, value in (a.split("=", 1) for a in args.engine_arg)}
    triton_dir = os.environ.get("TRITON_CACHE_DIR")
    before = cache_entries(triton_dir)
    t = time.time()
    import torch

    torch_s = time.time() - t
    t = time.time()
    import nanoserve
    from nanoserve import LLM, SamplingParams

    import_s = time.time() - t
    pre_imports = {}
    for name in filter(None, args.pre_import.split(",")):  # what the first forward would otherwise import
        t = time.time()
        importlib.import_module(name)
        pre_imports[name] = time.time() - t
    if args.warm_up == "first":
        warm_up_first_only()
    if args.tokenizer_first:
        tokenizer_first()
    times = {}
    patched = [label for module, dotted, label in PHASES if patch(times, module, dotted, label)]
    t = time.time()
    llm = LLM(args.model, **{"gpu_memory_utilization": 0.9, **engine_args})
    constructor_s = time.time() - t
    ready_s = time.time() - LAUNCHED
    dynamo = "torch._dynamo" in sys.modules  # a torch.library custom op's first call (chapter 08) or a decorator loads it
    first = llm.generate([{"prompt_token_ids": [1, 2, 3]}], SamplingParams(max_tokens=16, temperature=0.0),
                         use_tqdm=False)
    first_s = time.time() - LAUNCHED
    graphs = getattr(getattr(llm.llm_engine, "core", None), "executor", None)
    result = {"label": args.label, "engine_args": engine_args, "backend": llm.config.attention_backend,
              "greedy_tokens": list(first[0].outputs[0].token_ids), "warm_up": args.warm_up, "pre_imports_s": pre_imports,
              "tokenizer_first": args.tokenizer_first,
              "nanoserve_file": os.path.relpath(nanoserve.__file__),  # no machine path in a record
              "torch": torch.__version__,
              "triton_cache": "warm" if before else "cold", "triton_kernels_before": before,
              "triton_kernels_after": cache_entries(triton_dir),
              "interpreter_and_script_s": START - LAUNCHED, "import_torch_s": torch_s, "import_nanoserve_s": import_s,
              "constructor_s": constructor_s, "process_ready_s": ready_s, "process_first_tokens_s": first_s,
              "forward_graphs": len(getattr(graphs, "graphs", {}) or {}),
              "head_graphs": len(getattr(graphs, "head_graphs", {}) or {}),
              "torch_dynamo_imported": dynamo, "phases": times, "patched": patched,
              "note": "phase times are summed wall times after a CUDA sync; nested phases overlap their callers"}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"[startup] {args.label} {engine_args or ''} on {result['backend']}, warm-up {args.warm_up} pre-imports {pre_imports}: triton cache {result['triton_cache']}: ready {ready_s:.1f} s (constructor "
          f"{constructor_s:.1f} s, torch import {torch_s:.1f} s), {result['forward_graphs']} forward + "
          f"{result['head_graphs']} head graphs, Triton kernels {before} -> {result['triton_kernels_after']}, "
          f"torch._dynamo imported: {dynamo}")
    for label, entry in sorted(times.items(), key=lambda kv: -kv[1]["s"]):
        print(f"[startup]   {label:40s} {entry['s']:7.2f} s  ({entry['calls']} calls)")


if __name__ == "__main__":
    main()
