"""Many streams at once through the HTTP server on the CPU: a delta per step against steps merged while the reader
was behind (issue 36, 2026-12-06, third session), (--compare worker) the engine on a thread of the server's
process against the engine in a process of its own (chapter 16 section 6), or (--compare uvicorn) uvicorn on
asyncio's loop and h11 against uvloop and httptools, or (--compare gc) the engine thread and the engine process,
each at CPython's garbage collector thresholds and at the raised ones the engine process sets in its two processes.

The server's AsyncEngine on the tiny random Qwen3 whose forward is stubbed by a sleep as long as an H100 step (as
`serve_burst.py` does), behind the real FastAPI app; a child process streams every request at once, as
`vllm bench serve` does at rate `inf`, with prompt token ids (no tokenizing). Per run: output tokens per second,
first-token and per-token times, SSE chunks per request, the engine's step period and the loop thread's CPU time.
The arms alternate. Writes JSON with provenance and prints a table last:

    python scripts/serve_saturation.py --out benchmarks/results/serve_saturation_cpu.json
    python scripts/serve_saturation.py --compare worker --out benchmarks/results/serve_engine_process_cpu.json
    python scripts/serve_saturation.py --compare uvicorn --out benchmarks/results/serve_uvloop_cpu.json
"""
import argparse
import functools
import gc
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

from nanobench.provenance import collect_provenance, utc_now
from nanoserve.entrypoints import async_engine
from nanoserve.entrypoints.async_engine import RequestGroup
from nanoserve.entrypoints.engine_process import COLLECTOR_THRESHOLDS
from nanoserve.entrypoints.launch import BackgroundServer
from nanoserve.entrypoints.openai_server import build_app
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.serve import FrontendArgs
from serve_burst import served_engine
from serve_overhead import VOCAB, _server_loop, client, on_loop

MERGED = RequestGroup.__aiter__


async def one_delta_per_step(self):
    """RequestGroup.__aiter__ before 2026-12-06: every step's outputs yielded as they came, however late."""
    while self.unfinished:
        items = await self.queue.get()
        now = time.perf_counter()
        for item in items:
            if isinstance(item, BaseException):
                raise item
            self._account(item, now)
            yield item
    if self.ended is not None:
        raise self.ended


ARMS = {"merged when behind": MERGED, "one delta per step": one_delta_per_step}
DEFAULT_THRESHOLDS = gc.get_threshold()  # CPython's, before any EngineProcess raises them
SERVERS = {  # --compare: arm -> (engine in its own process, uvicorn settings, collector thresholds or None for the
    # worker's own: CPython's for the thread, COLLECTOR_THRESHOLDS for the process); "merge" reads one server two ways
    "merge": {"merge": (False, {}, None)},
    "worker": {"engine thread": (False, {}, None), "engine process": (True, {}, None)},
    "uvicorn": {"asyncio + h11": (False, {"loop": "asyncio", "http": "h11"}, None),
                "uvloop + httptools": (False, {"loop": "uvloop", "http": "httptools"}, None)},
    "gc": {"engine thread": (False, {}, None),
           f"engine thread, gc {COLLECTOR_THRESHOLDS[0]}": (False, {}, COLLECTOR_THRESHOLDS),
           "engine process": (True, {}, None),
           f"engine process, gc {DEFAULT_THRESHOLDS[0]}": (True, {}, DEFAULT_THRESHOLDS)},
}
SERVERS["gc-thread"] = {arm: spec for arm, spec in SERVERS["gc"].items() if not spec[0]}  # gc's two thread arms


def set_collector(thresholds: tuple, engine) -> None:
    """In the engine's process: an arm's collector thresholds (bound with functools.partial, EngineProcess's
    on_start)."""
    gc.set_threshold(*thresholds)


def served_run(server, loop, llm_engine, args) -> dict:
    """One burst through the server: the client's view, the engine's step period (an engine in this process), the
    loop's CPU seconds."""
    starts, step = [], getattr(llm_engine, "step", None)

    def timed_step():
        starts.append(time.perf_counter())
        return step()

    if step is not None:
        llm_engine.step = timed_step
    pauses, began = [], []

    def collector(phase, info):  # the garbage collector's pauses in this (the server's) process
        if phase == "start":
            began.append(time.perf_counter())
        else:
            pauses.append((info["generation"], 1e3 * (time.perf_counter() - began.pop())))

    gc.callbacks.append(collector)
    cpu0 = on_loop(loop, time.thread_time)
    cmd = [sys.executable, __file__, "--client", server.url, "--requests", str(args.requests),
           "--prompt-len", str(args.prompt_len), "--max-tokens", str(args.max_tokens)]
    seen = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    loop_cpu = on_loop(loop, time.thread_time) - cpu0
    gc.callbacks.remove(collector)
    if step is not None:
        llm_engine.step = step
    first, last, chunks = zip(*((t[0] - seen["start"], t[-1] - seen["start"], len(t)) for t in seen["times"]))
    periods = [b - a for a, b in zip(starts, starts[1:])]
    return {"wall_s": seen["wall_s"], "output_tok_s": args.requests * args.max_tokens / seen["wall_s"],
            "ttft_ms_median": 1e3 * statistics.median(first),
            "tpot_ms_median": 1e3 * statistics.median((b - a) / (args.max_tokens - 1) for a, b in zip(first, last)),
            "chunks_per_request_median": statistics.median(chunks), "steps": len(starts) or None,
            "step_period_ms_median": 1e3 * statistics.median(periods) if periods else None, "loop_cpu_s": loop_cpu,
            "gc_full_ms": sum(ms for g, ms in pauses if g == 2), "gc_young_ms": sum(ms for g, ms in pauses if g < 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--client", default=None, help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3, help="each arm this many times, arms alternating")
    p.add_argument("--compare", choices=tuple(SERVERS), default="merge",
                   help="merge: how the loop reads a step's outputs; worker: engine thread against engine process; "
                        "uvicorn: asyncio and h11 against uvloop and httptools; gc: thread and process, each at CPython's "
                        f"first threshold ({DEFAULT_THRESHOLDS[0]}) and at the process's ({COLLECTOR_THRESHOLDS[0]}); "
                        "gc-thread: the thread's two")
    p.add_argument("--engine-process", action="store_true",
                   help="--compare merge or uvicorn: every server's engine in a process of its own")
    p.add_argument("--model", default=None, help="a checkpoint served on the GPU, its real forward (default: the "
                   "tiny model on the CPU, its forward stubbed)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.client:
        print(json.dumps(client(args.client, args.requests, args.prompt_len, args.max_tokens, seed=0)))
        return 0
    tmp = tempfile.TemporaryDirectory()
    model = args.model or str(make_tiny_checkpoint(tmp.name, seed=0, with_tokenizer=True, vocab_size=VOCAB))
    servers = {}  # arm -> (engine, server, loop): one server per arm, or one for both read modes
    share = {"gpu_memory_utilization": 0.9 / len(SERVERS[args.compare])} if args.model else {}  # all on one GPU
    thresholds = {arm: t or (COLLECTOR_THRESHOLDS if process or args.engine_process else DEFAULT_THRESHOLDS)
                  for arm, (process, _, t) in SERVERS[args.compare].items()}  # set here for each arm's bursts
    for arm, (process, settings, chosen) in SERVERS[args.compare].items():
        tuned = functools.partial(set_collector, chosen) if chosen and process else None
        engine = served_engine(model, process=process or args.engine_process, gpu=args.model is not None,
                               on_start=tuned, **share)
        server = BackgroundServer(build_app(engine, FrontendArgs(served_model_name="tiny"), model))
        vars(server.server.config).update(settings)  # read when the server starts
        servers[arm] = (engine, server.start(), _server_loop(server))
    loops = {arm: f"{type(loop).__module__}.{type(loop).__name__}, {server.server.config.http_protocol_class.__name__}"
             for arm, (_, server, loop) in servers.items()}
    print("event loops and HTTP protocols:", loops)
    arms = ARMS if args.compare == "merge" else dict.fromkeys(servers, MERGED)
    warm = argparse.Namespace(**{**vars(args), "requests": 8, "max_tokens": 4})
    for engine, server, loop in servers.values():
        served_run(server, loop, engine.engine, warm)  # every path once
    runs = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name, aiter in arms.items():
            engine, server, loop = servers.get(name, servers.get("merge"))
            async_engine.RequestGroup.__aiter__ = aiter
            gc.set_threshold(*thresholds.get(name, thresholds.get("merge", DEFAULT_THRESHOLDS)))
            try:
                run = served_run(server, loop, engine.engine, args)
            finally:
                async_engine.RequestGroup.__aiter__ = MERGED
                gc.set_threshold(*DEFAULT_THRESHOLDS)
            runs[name].append(run)
            print(f"{name:20s} " + ", ".join(f"{k} {v:.4g}" for k, v in run.items() if v is not None), flush=True)
    for engine, server, _ in servers.values():
        server.stop()
        engine.shutdown()
    tmp.cleanup()
    print(f"\n{args.requests} streams at once, {args.prompt_len} tokens in, {args.max_tokens} out (runs in order)")
    for key in ("output_tok_s", "step_period_ms_median", "tpot_ms_median", "ttft_ms_median",
                "chunks_per_request_median", "loop_cpu_s", "gc_full_ms", "gc_young_ms"):
        print(f"{key:26s} " + "   ".join(f"{name}: " + " · ".join("-" if r[key] is None else f"{r[key]:.4g}"
                                                                   for r in rs) for name, rs in runs.items()))
    if args.out:
        provenance = {**collect_provenance(), "cores": os.cpu_count(), "date": utc_now(),
                      "command": shlex.join(["python", *sys.argv]), "config": vars(args), "servers": loops,
                      "model": args.model or f"make_tiny_checkpoint(with_tokenizer=True, vocab_size={VOCAB}), forward "
                               "stubbed by sleep(3 ms + 4 µs per token)", "client": "httpx in a child process, prompt token ids"}
        with open(args.out, "w") as f:
            json.dump({"provenance": provenance, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
