"""Host cost of taking a workload in: LLM.generate's door checks and queueing, before the first step, on the CPU.

Usage: python benchmarks/intake_bench.py [--workload high-churn] [--repeats 7] [--out FILE.json]
Builds a tiny random checkpoint (the model never runs), makes the workload's requests as nanobench does, then times,
per repeat, checking every request (`LLMEngine.process_request`) and queueing them (the router's `add`), and aborts
them again. Prints medians in ms and writes them with provenance to --out.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere: nanobench sits at the root

from nanobench.engines import NanoserveEngine  # noqa: E402
from nanobench.provenance import collect_provenance, command_line, utc_now  # noqa: E402
from nanobench.workloads import make_workload  # noqa: E402


def main(argv=None) -> dict:
    """Time the intake of one workload's requests; return (and optionally write) the result."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="high-churn")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    from nanoserve.model.tiny import make_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:  # the weights are loaded by the constructor; the files can go
        bench = NanoserveEngine(make_tiny_checkpoint(Path(tmp) / "tiny"),
                                dict(dtype="float32", skip_tokenizer_init=True, device="cpu"))
    engine, router = bench.llm.engine, bench.llm._router
    requests = make_workload(args.workload, max_token_id=engine.input_processor.vocab_size - 1, seed=0)
    prompts, params = bench.prepare(requests, temperature=0.0)  # as the harness hands them to generate
    check_ms, queue_ms = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        checked = [engine.process_request(p, sp, stream_text=False) for p, sp in zip(prompts, params)]
        t1 = time.perf_counter()
        router.add(checked, wants_deltas=False)
        t2 = time.perf_counter()
        for r in checked:
            router.abort(r.request_id)
        check_ms.append(1e3 * (t1 - t0))
        queue_ms.append(1e3 * (t2 - t1))
    result = {"workload": args.workload, "requests": len(requests), "repeats": args.repeats,
              "check_ms": round(statistics.median(check_ms), 2), "queue_ms": round(statistics.median(queue_ms), 2),
              "check_ms_runs": [round(x, 2) for x in check_ms], "queue_ms_runs": [round(x, 2) for x in queue_ms],
              "command": command_line(["benchmarks/intake_bench.py", *(argv or sys.argv[1:])]).replace(
                  "-m nanobench ", ""), "date": utc_now(), "provenance": collect_provenance()}
    print(f"{args.workload}: {len(requests)} requests; door checks {result['check_ms']} ms, "
          f"queueing {result['queue_ms']} ms (medians of {args.repeats})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
