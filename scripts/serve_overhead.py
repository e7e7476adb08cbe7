"""Where the host time per token goes between the engine step and the SSE stream (issue 36, item 3).

The server runs in this process on the tiny random model (CPU), instrumented; the streaming client runs in a child
process, so it does not share our interpreter lock. Writes JSON with provenance and prints a table last:

    python scripts/serve_overhead.py --label before --out benchmarks/results/serve_overhead_cpu.json
"""
import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

VOCAB = 8192  # a small lm_head, so a CPU decode step lasts milliseconds (ids below it are Qwen tokens too)
IDLE = ("<method 'poll' of 'select.epoll'", "<method 'select' of")  # the loop waiting for work: not host cost
AREAS = [  # (area, substrings of a profiled function's file or name), first match wins
    ("handoff: worker -> loop (_deliver, asyncio.Queue)", ("async_engine.py:", "queues.py", "_deliver")),
    ("metrics (prometheus histograms)", ("metrics.py", "prometheus_client")),
    ("chunk dicts (choices, logprobs, usage)", ("protocol.py", "chat_output.py")),
    ("JSON + SSE framing (json.dumps, sse)", ("json/", "openai_server.py")),
    ("starlette/fastapi response", ("starlette", "fastapi")),
    ("uvicorn + h11 HTTP framing", ("uvicorn", "h11")),
    ("asyncio loop + socket writes", ("asyncio", "selectors", "socket", "<method 'send'", "<method 'run'",
                                      "contextvars", "_asyncio", "<built-in method _asyncio")),
]


REPO = str(Path(__file__).resolve().parents[1]) + "/"  # stripped from profiled file names: no machine paths


def client(url: str, n: int, prompt_len: int, max_tokens: int, seed: int) -> dict:
    """Stream n concurrent /v1/completions; per request the arrival time of each chunk that carries text."""
    import httpx

    rng = random.Random(seed)
    prompts = [[rng.randrange(1000, VOCAB) for _ in range(prompt_len)] for _ in range(n)]

    async def one(http, prompt) -> list:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                "temperature": 0.0}
        times = []
        async with http.stream("POST", url + "/v1/completions", json=body) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    if json.loads(line[6:])["choices"][0]["text"]:
                        times.append(time.perf_counter())
        return times

    async def run() -> list:
        limits = httpx.Limits(max_connections=n + 8)  # every stream at once (httpx's default pool holds 100)
        async with httpx.AsyncClient(timeout=600, trust_env=False, limits=limits) as http:
            return await asyncio.gather(*(one(http, p) for p in prompts))

    t0 = time.perf_counter()
    times = asyncio.run(run())
    return {"wall_s": time.perf_counter() - t0, "start": t0, "times": times}


def percentile(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class StepClock:
    """Wraps LLMEngine.step: wall and worker-thread CPU time of each step, and how many sequences were running.

    With `window` (first, last, start, stop), the first-th and last-th steps that return `n` outputs call start()
    and stop() on the server's loop: between them, every stream is decoding (no request parsing, no prefill)."""

    def __init__(self, engine, n: int = 0, loop=None, window=None):
        self.steps, self._step, self.scheduler = [], engine.step, engine.scheduler
        self.n, self.loop, self.window, self.full = n, loop, window, 0
        engine.step = self

    prof = None  # a cProfile.Profile to run around each step (on the worker thread)

    def __call__(self):
        running, w0, c0 = self.scheduler.num_running, time.perf_counter(), time.thread_time()
        if self.prof:
            self.prof.enable()
        outs = self._step()
        if self.prof:
            self.prof.disable()
        self.steps.append((w0, time.perf_counter(), time.thread_time() - c0, running))
        if self.window and len(outs) == self.n:
            self.full += 1
            first, last, start, stop = self.window
            if self.full in (first, last):  # queued behind this step's deliveries
                self.loop.call_soon_threadsafe(start if self.full == first else stop)
        return outs


def on_loop(loop, fn):
    """Run fn() on the server's event loop thread and return its result."""
    done, box = threading.Event(), []
    loop.call_soon_threadsafe(lambda: (box.append(fn()), done.set()))
    done.wait(10)
    return box[0]


def engine_kwargs(args) -> dict:
    """The engine's options: the tiny model eager in fp32 on the CPU, or a checkpoint as served on a GPU."""
    if args.device == "cpu":
        return {"device": "cpu", "enforce_eager": True, "max_model_len": 1024, "max_num_seqs": args.concurrency}
    return {"dtype": "bfloat16", "max_model_len": 1024, "max_num_seqs": max(256, args.concurrency)}


def serve_once(model_dir: Path, args, profile: bool) -> dict:
    """One served run: engine steps, the loop thread's CPU time, the client's chunk times (and a profile)."""
    from nanoserve.engine.engine import LLMEngine
    from nanoserve.entrypoints.async_engine import AsyncEngine
    from nanoserve.entrypoints.launch import BackgroundServer
    from nanoserve.entrypoints.openai_server import build_app
    from nanoserve.serve import FrontendArgs

    llm_engine = LLMEngine.from_args(str(model_dir), **engine_kwargs(args))
    engine = AsyncEngine(llm_engine)
    server = BackgroundServer(build_app(engine, FrontendArgs(served_model_name="tiny"), str(model_dir))).start()
    loop = _server_loop(server)
    cmd = [sys.executable, __file__, "--client", server.url, "--concurrency", str(args.concurrency),
           "--prompt-len", str(args.prompt_len), "--max-tokens", str(args.max_tokens)]
    subprocess.run(cmd + ["--max-tokens", "4"], check=True, capture_output=True)  # warm up every path once
    prof = cProfile.Profile() if profile else None
    marks = {}

    def start():
        marks["cpu0"] = time.thread_time()
        if prof:
            prof.enable()

    def stop():
        if prof:
            prof.disable()
        marks["cpu1"] = time.thread_time()

    first, last = 4, args.max_tokens - 4  # steady decode: every stream has its first token, none has finished
    clock = StepClock(llm_engine, args.concurrency, loop, (first, last, start, stop))
    loop_cpu0 = on_loop(loop, time.thread_time)
    result = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    loop_cpu = on_loop(loop, time.thread_time) - loop_cpu0
    if "cpu1" in marks:
        window = {"tokens": (last - first) * args.concurrency, "loop_cpu_s": marks["cpu1"] - marks["cpu0"]}
    else:  # no steps of all n streams were seen (a GPU host on 2026-12-06): the whole run's loop CPU, said so
        print(f"steady-decode window not seen ({clock.full} steps of all {args.concurrency} streams): loop CPU per "
              "token is the whole run's", file=sys.stderr)
        window = {"tokens": sum(len(t) for t in result["times"]), "loop_cpu_s": loop_cpu}
    server.stop()
    engine.shutdown()
    return {"client": result, "steps": clock.steps, "loop_cpu_s": loop_cpu, "window": window, "profile": prof}


def _server_loop(server):
    """The event loop uvicorn runs on its thread (found through one of its server objects)."""
    return server.server.servers[0].get_loop()


def summarise(run: dict, n: int) -> dict:
    """Client ITL / TPOT against the engine's decode steps; host CPU per delivered token."""
    times = run["client"]["times"]
    itl = [b - a for t in times for a, b in zip(t, t[1:])]
    tpot = [(t[-1] - t[0]) / (len(t) - 1) for t in times if len(t) > 1]
    first, last = min(t[0] for t in times), max(t[-1] for t in times)
    decode = [s for s in run["steps"] if s[1] >= first and s[0] <= last and s[3] == n]  # all n decoding
    wall = [s[1] - s[0] for s in decode]
    period = [b[0] - a[0] for a, b in zip(decode, decode[1:])]
    tokens = sum(len(t) for t in times)
    worker_busy = sum(s[2] for s in run["steps"])
    return {"tokens": tokens, "client_itl_ms_p50": 1e3 * statistics.median(itl),
            "client_itl_ms_p90": 1e3 * percentile(itl, 0.9), "client_tpot_ms_p50": 1e3 * statistics.median(tpot),
            "engine_step_ms_p50": 1e3 * statistics.median(wall), "engine_step_cpu_ms_p50": 1e3 * statistics.median(
                [s[2] for s in decode]), "step_period_ms_p50": 1e3 * statistics.median(period),
            "itl_over_step": statistics.median(itl) / statistics.median(wall),
            "loop_cpu_us_per_token": 1e6 * run["window"]["loop_cpu_s"] / run["window"]["tokens"],
            "loop_cpu_us_per_step": 1e6 * run["window"]["loop_cpu_s"] / run["window"]["tokens"] * n,
            "loop_cpu_us_per_token_whole_run": 1e6 * run["loop_cpu_s"] / tokens,
            "worker_gap_ms_p50": 1e3 * statistics.median(p - (s[1] - s[0]) for p, s in zip(period, decode)),
            "worker_step_cpu_s": worker_busy, "decode_steps": len(decode)}


def breakdown(prof: cProfile.Profile, tokens: int) -> dict:
    """The loop thread's profiled own time (tottime) in steady decode, by area, in µs per token (profiler included)."""
    stats = pstats.Stats(prof)
    areas: dict = {}
    top = []
    for (file, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
        key = f"{file}:{line}({name})"
        if any(s in key for s in IDLE):
            continue
        area = next((a for a, subs in AREAS if any(s in key for s in subs)), "other")
        areas[area] = areas.get(area, 0.0) + tt
        top.append((tt, key))
    total = sum(areas.values())
    top.sort(reverse=True)
    return {"us_per_token": {a: round(1e6 * t / tokens, 2) for a, t in sorted(areas.items(), key=lambda x: -x[1])},
            "total_us_per_token": round(1e6 * total / tokens, 2),
            "top_functions_us_per_token": [[_portable_name(k), round(1e6 * t / tokens, 2)] for t, k in top[:25]]}


def _portable_name(key: str) -> str:
    """A profiled function's file named without this machine's paths."""
    return (key.replace(str(Path(sys.prefix)), "<venv>").replace(str(Path(sys.base_prefix)), "<python>")
            .replace(REPO, ""))


def step_profile(prof: cProfile.Profile, steps: int) -> list:
    """The engine step's top functions by own time, in µs per step (profiler included)."""
    stats = pstats.Stats(prof).stats.items()
    top = sorted(((tt, f"{Path(file).name}:{line}({name})") for (file, line, name), (_, _, tt, _, _) in stats),
                 reverse=True)
    return [[key, round(1e6 * tt / steps, 1)] for tt, key in top[:15]]


def on_thread(fn):
    """fn() on a fresh thread, as the server's worker steps the engine (here torch's CPU ops run ~2.5x slower on a
    thread other than the one that first ran them, each with its own OpenMP pool: compare like with like)."""
    box = []
    thread = threading.Thread(target=lambda: box.append(fn()))
    thread.start()
    thread.join()
    return box[0]


def offline(model_dir: Path, args) -> dict:
    """The same load through LLM.generate (stepped on a thread): wall time per decode step at batch n."""
    from nanoserve import LLM, SamplingParams

    llm = LLM(str(model_dir), **engine_kwargs(args))
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(1000, VOCAB) for _ in range(args.prompt_len)]}
               for _ in range(args.concurrency)]
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True, temperature=0.0)
    on_thread(lambda: llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False))
    clock = StepClock(llm.llm_engine)
    t0 = time.perf_counter()
    on_thread(lambda: llm.generate(prompts, params, use_tqdm=False))
    wall = time.perf_counter() - t0
    decode = clock.steps[-(args.max_tokens - 2):]  # all finish together: the last steps are decode steps
    clock.prof, n = cProfile.Profile(), len(clock.steps)
    on_thread(lambda: llm.generate(prompts, params, use_tqdm=False))
    return {"step_profile_us": step_profile(clock.prof, len(clock.steps) - n), "wall_s": wall,
            "engine_step_ms_p50": 1e3 * statistics.median(s[1] - s[0] for s in decode),
            "engine_step_cpu_ms_p50": 1e3 * statistics.median(s[2] for s in decode),
            "step_period_ms_p50": 1e3 * statistics.median(b[0] - a[0] for a, b in zip(decode, decode[1:])),
            "tpot_ms": 1e3 * wall / args.max_tokens}


def engine_only(model_dir: Path, args) -> dict:
    """The same load through AsyncEngine without HTTP: its worker's steps (streamed text) and the loop's reading."""
    from nanoserve.engine.engine import LLMEngine
    from nanoserve.entrypoints.async_engine import AsyncEngine
    from nanoserve.sampling import SamplingParams

    llm_engine = LLMEngine.from_args(str(model_dir), **engine_kwargs(args))
    engine = AsyncEngine(llm_engine)
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(1000, VOCAB) for _ in range(args.prompt_len)]}
               for _ in range(args.concurrency)]

    async def run(max_tokens: int) -> None:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)

        async def one(i: int) -> None:
            async for _ in await engine.generate([prompts[i]], params, f"r{max_tokens}-{i}"):
                pass
        await asyncio.gather(*(one(i) for i in range(args.concurrency)))

    asyncio.run(run(4))
    clock = StepClock(llm_engine)
    asyncio.run(run(args.max_tokens))
    decode = clock.steps[-(args.max_tokens - 2):]
    clock.prof, n = cProfile.Profile(), len(clock.steps)
    asyncio.run(run(args.max_tokens))
    engine.shutdown()
    return {"step_profile_us": step_profile(clock.prof, len(clock.steps) - n),
            "engine_step_ms_p50": 1e3 * statistics.median(s[1] - s[0] for s in decode),
            "engine_step_cpu_ms_p50": 1e3 * statistics.median(s[2] for s in decode),
            "step_period_ms_p50": 1e3 * statistics.median(b[0] - a[0] for a, b in zip(decode, decode[1:]))}


def provenance(args) -> dict:
    import fastapi
    import pydantic
    import starlette
    import torch
    import uvicorn

    import nanoserve

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    import hashlib

    import nanoserve.entrypoints as ep

    here = Path(ep.__file__).parent  # the code that ran (an older copy may come first on PYTHONPATH)
    code = hashlib.sha1(b"".join(f.read_bytes() for f in sorted(here.glob("*.py")))).hexdigest()[:12]
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"command": "python scripts/serve_overhead.py " + " ".join(sys.argv[1:]), "commit": commit,
            "entrypoints_sha1": code, "cpu": cpu, "cores": os.cpu_count(), "load_avg": os.getloadavg(),
            "python": platform.python_version(), "torch": torch.__version__, "nanoserve": nanoserve.__version__,
            "fastapi": fastapi.__version__, "starlette": starlette.__version__, "uvicorn": uvicorn.__version__,
            "pydantic": pydantic.__version__,
            "note": "offline LLM.generate is stepped on a thread, like the server's worker (torch CPU ops on the "
                    "loading thread run ~2.5x faster here: per-thread OpenMP pools)",
            "model": args.model or f"make_tiny_checkpoint(with_tokenizer=True, vocab_size={VOCAB}), fp32, eager",
            "engine": {**engine_kwargs(args), "device": args.device},
            "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
            "config": {"concurrency": args.concurrency, "prompt_len": args.prompt_len, "max_tokens": args.max_tokens,
                       "runs": args.runs, "api": "/v1/completions stream, ignore_eos, temperature 0"},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", default=None, help=argparse.SUPPRESS)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=3, help="unprofiled served runs (the median is reported)")
    p.add_argument("--label", default="run", help="the key this measurement gets in --out (before, after)")
    p.add_argument("--out", default=None, help="JSON to write (an existing file keeps its other labels)")
    p.add_argument("--model", default=None, help="a checkpoint to serve on the GPU (default: the tiny model, CPU)")
    args = p.parse_args()
    if args.client:
        print(json.dumps(client(args.client, args.concurrency, args.prompt_len, args.max_tokens, 0)))
        return 0
    from nanoserve.model.tiny import make_tiny_checkpoint

    args.device = "cuda" if args.model else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model) if args.model else make_tiny_checkpoint(Path(tmp) / "tiny", with_tokenizer=True,
                                                                             vocab_size=VOCAB)
        runs = [summarise(serve_once(model_dir, args, profile=False), args.concurrency) for _ in range(args.runs)]
        profiled = serve_once(model_dir, args, profile=True)
        off = offline(model_dir, args)
        bare = engine_only(model_dir, args)
    served = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    result = {"provenance": provenance(args), "served_runs": runs, "served_median": served,
              "profiled_loop": breakdown(profiled["profile"], profiled["window"]["tokens"]),
              "offline": off, "async_engine_no_http": bare}
    if args.out:
        out = Path(args.out)
        data = json.loads(out.read_text()) if out.exists() else {}
        data[args.label] = result
        out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"\n{args.label}: {args.concurrency} concurrent streams, {args.prompt_len} in / {args.max_tokens} out, "
          f"{'tiny model on CPU' if args.device == 'cpu' else result['provenance']['gpu']} ({len(runs)} runs, median)")
    rows = [("engine step (served, decode, wall)", served["engine_step_ms_p50"], "ms"),
            ("engine step period (served)", served["step_period_ms_p50"], "ms"),
            ("client ITL p50", served["client_itl_ms_p50"], "ms"),
            ("client TPOT p50", served["client_tpot_ms_p50"], "ms"),
            ("client ITL / engine step", served["itl_over_step"], "x"),
            ("engine step CPU (served)", served["engine_step_cpu_ms_p50"], "ms"),
            ("engine step, AsyncEngine without HTTP", bare["engine_step_ms_p50"], "ms"),
            ("engine step CPU, AsyncEngine without HTTP", bare["engine_step_cpu_ms_p50"], "ms"),
            ("offline engine step (LLM.generate)", off["engine_step_ms_p50"], "ms"),
            ("offline engine step CPU", off["engine_step_cpu_ms_p50"], "ms"),
            ("offline TPOT (wall / tokens)", off["tpot_ms"], "ms"),
            ("worker gap between steps (handoff)", served["worker_gap_ms_p50"], "ms"),
            ("loop thread CPU per token (steady decode)", served["loop_cpu_us_per_token"], "µs"),
            ("loop thread CPU per step", served["loop_cpu_us_per_step"], "µs")]
    for name, value, unit in rows:
        print(f"  {name:<40} {value:9.3f} {unit}")
    print("  loop thread, profiled own time per token (profiler overhead included):")
    for area, us in result["profiled_loop"]["us_per_token"].items():
        print(f"    {area:<50} {us:8.2f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
