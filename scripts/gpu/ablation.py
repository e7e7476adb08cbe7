"""What each idea of the course buys, measured on one GPU: a ladder that adds the ideas of chapters 08-13 one at a
time to plain torch attention run eagerly, and leave-one-out from the full engine; four throughput workloads at
ablation scale plus batch 1/8/32 latency, several runs each; one process per configuration; JSON with provenance,
a table last.

    python3 scripts/gpu/ablation.py --model DIR --out DIR [--configs ladder,loo] [--runs 5]

--model is a checkpoint directory (`python3 -m nanobench build-model --config qwen3-0.6b --out DIR` builds random
weights with Qwen3-0.6B's shapes). Chapter 15 is to read the JSON (benchmarks/results/ablation_h200.json).

Time on an H200: a fast configuration needs about 40 s for everything; the first rung (torch attention, eager) ran
the random workload at 412 tok/s (26 s a run, 2026-12-03), so it alone needs about 10 minutes at 5 runs: give it a
call of its own (--configs base, with --budget-s 540), then ladder-rest and loo in one call each."""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# every switch the ladder turns, named by the chapter that teaches the idea
BASE = dict(attention_backend="torch", enforce_eager=True, fused_kernels=False, async_scheduling=False,
            disable_cascade_attn=True)
FULL = dict(attention_backend="flash", enforce_eager=False, compilation_config={"cudagraph_mode": "FULL"},
            fused_kernels=True, async_scheduling=True, disable_cascade_attn=False)
LADDER = [  # (name, what changes from the rung before)
    ("torch attention, eager", {}),
    ("+ flash-attn (08)", dict(attention_backend="flash")),
    ("+ decode graphs (09)", dict(enforce_eager=False, compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"})),
    ("+ fused kernels (10)", dict(fused_kernels=True)),
    ("+ one step ahead (11)", dict(async_scheduling=True)),
    ("+ mixed-step graphs (12)", dict(compilation_config={"cudagraph_mode": "FULL"})),
    ("+ cascade (13) = full", dict(disable_cascade_attn=False)),
]
# (name, what changes from FULL); not "full - flash-attn": the torch backend's decode gathers every block-table
# column, and a captured table is max_model_len wide, so its graphs would read the longest context on every lane
LEAVE_ONE_OUT = [
    ("full", {}),  # measured again in the same call, as the ratios' reference
    ("full - prefix caching (04)", dict(enable_prefix_caching=False)),
    ("full - all graphs (09, 12)", dict(enforce_eager=True, compilation_config=None)),
    ("full - fused kernels (10)", dict(fused_kernels=False)),
    ("full - one step ahead (11)", dict(async_scheduling=False)),
    ("full - mixed-step graphs (12)", dict(compilation_config={"cudagraph_mode": "FULL_DECODE_ONLY"})),
    ("full - cascade (13)", dict(disable_cascade_attn=True)),
]
# flash-attn-4 (chapter 19) against flash-attn 2 in the full engine; the first flash4 process compiles its kernels
# into an empty cache (ablation_call.sh points XDG_CACHE_HOME at a fresh folder), the second loads them
FLASH4 = [
    ("full, flash-attn 2", dict(attention_backend="flash")),
    ("full, flash-attn-4 (19), cold cache", dict(attention_backend="flash4")),
    ("full, flash-attn-4 (19), warm cache", dict(attention_backend="flash4")),
]
# which decode kernel from how many lanes: flash-attn-4 everywhere, or flash-attn 2's decode from 16 or 64 lanes on
FLASH4_DECODE = [
    ("full, flash-attn 2", dict(attention_backend="flash")),
    ("full, flash-attn-4 (19)", dict(attention_backend="flash4", flash2_decode_from=None)),
    ("full, flash-attn-4, flash-attn 2 decode from 16 lanes", dict(attention_backend="flash4", flash2_decode_from=16)),
    ("full, flash-attn-4, flash-attn 2 decode from 64 lanes", dict(attention_backend="flash4", flash2_decode_from=64)),
]
# nanobench's workloads with fewer requests and shorter outputs, so the slowest rung still finishes every run
WORKLOADS = {"random": dict(num_requests=48, output_len=(100, 400)),
             "shared-prefix": dict(num_requests=48, output_len=(100, 400)),
             "high-churn": dict(num_requests=256),
             "prefill-bound": dict(num_requests=24)}
LATENCY_BATCHES = (1, 8, 32)
MAX_TOKEN_ID = 10_000  # prompt ids are drawn below this (nanobench's default)
ENGINE = dict(max_model_len=4096, gpu_memory_utilization=0.85, seed=0)


def configurations(which: list) -> list:
    """[(group, name, engine kwargs)] for the groups asked for, ladder rungs cumulative."""
    found, options = [], dict(BASE)
    for rung, (name, change) in enumerate(LADDER):
        options = {**options, **change}
        if "ladder" in which or ("base" in which and rung == 0) or ("ladder-rest" in which and rung > 0):
            found.append(("ladder", name, dict(options)))
    if "loo" in which:
        found += [("loo", name, {**FULL, **change}) for name, change in LEAVE_ONE_OUT]
    if "flash4" in which:
        found += [("flash4", name, {**FULL, **change}) for name, change in FLASH4]
    if "flash4-decode" in which:
        found += [("flash4-decode", name, {**FULL, **change}) for name, change in FLASH4_DECODE]
    return found


def measure_one(model: str, options: dict, runs: int, budget_s: float) -> dict:
    """Build one engine, then time every workload (`runs` runs each) and latency, within `budget_s` seconds."""
    from nanobench.engines import make_engine
    from nanobench.measure import measure_latency, measure_throughput
    from nanobench.workloads import make_workload

    began = time.perf_counter()
    if "flash2_decode_from" in options:  # an experiment's knob, not an engine option: chapter 19's decode split
        from nanoserve.attention.flash4 import Flash4AttentionBackend

        Flash4AttentionBackend.flash2_decode_from = options.pop("flash2_decode_from")
    engine = make_engine("nanoserve", model, {**ENGINE, **options, "skip_tokenizer_init": True})
    row = {"ready_s": time.perf_counter() - began, "workloads": {}, "skipped": []}
    for name, size in WORKLOADS.items():
        if time.perf_counter() - began > budget_s:
            row["skipped"].append(name)
            continue
        metrics, _ = measure_throughput(engine, make_workload(name, **size, max_token_id=MAX_TOKEN_ID),
                                        runs=runs, temperature=0.6, max_token_id=MAX_TOKEN_ID)
        row["workloads"][name] = {k: metrics[k] for k in ("tok_s", "tok_s_runs", "output_tokens", "complete",
                                                          "prompt_tokens", "num_requests")}
        print(f"  {name}: {metrics['tok_s']:,.0f} tok/s", flush=True)
    if time.perf_counter() - began <= budget_s:
        row["latency"] = measure_latency(engine, batch_sizes=LATENCY_BATCHES, reps=3, max_token_id=MAX_TOKEN_ID)["batches"]
    else:
        row["skipped"].append("latency")
    row["steps"] = engine.step_counters()  # steps, prefill/decode tokens and seconds, eager forwards
    engine.close()
    return row


def spread(values: list) -> str:
    """'median [min-max]' of tok/s runs."""
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def table(rows: list) -> str:
    """Median tok/s per workload and configuration, with each run's range, and batch-1 TPOT."""
    head = f"{'configuration':<32}" + "".join(f"{w:>26}" for w in WORKLOADS) + f"{'b1 TPOT ms':>12}"
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['name']:<32}  failed: {r['error'][:100]}")
            continue
        cells = [spread(r["workloads"][w]["tok_s_runs"]) if w in r["workloads"] else "skipped" for w in WORKLOADS]
        tpot = r.get("latency", {}).get("1", {}).get("tpot_ms")
        lines.append(f"{r['name']:<32}" + "".join(f"{c:>26}" for c in cells) + (f"{tpot:>12.2f}" if tpot else ""))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--configs", default="ladder,loo",
                        help="comma list of ladder (= base + ladder-rest), loo, flash4, flash4-decode")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=150, help="per configuration, after which it stops")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: JSON engine kwargs for one child process
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure_one(args.model, json.loads(args.one), args.runs, args.budget_s)))
        return
    from nanobench.provenance import collect_provenance

    provenance = collect_provenance()  # once: the machine and the tree do not change between configurations
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for group, name, options in configurations(args.configs.split(",")):
        print(f"== {name}: {options}", flush=True)
        cmd = [sys.executable, __file__, "--model", args.model, "--out", args.out, "--runs", str(args.runs),
               "--budget-s", str(args.budget_s), "--one", json.dumps(options)]
        row = {"group": group, "name": name, "options": options}
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.budget_s + 120, cwd=REPO)
            result = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
            print("\n".join(l for l in done.stdout.splitlines() if l.startswith("  ")), flush=True)
            if result:
                row.update(json.loads(result[-1][len("RESULT "):]))
            else:
                row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1]
        except subprocess.TimeoutExpired:
            row["error"] = f"timed out after {args.budget_s + 120:.0f} s"
        rows.append(row)
        result = {"provenance": {**provenance, "command": "python3 scripts/gpu/ablation.py "
                                 + " ".join(sys.argv[1:]), "nanoserve_commit": provenance["nanoserve_git"],
                                 "date": time.strftime("%Y-%m-%d"), "config": {
                                     "engine": ENGINE, "workloads": WORKLOADS, "latency_batches": LATENCY_BATCHES,
                                     "runs": args.runs, "temperature": 0.6,
                                     "weights": "random weights, exact Qwen3-0.6B shapes"}},
                  "rows": rows}
        (out / f"ablation_{args.configs.replace(',', '_')}.json").write_text(json.dumps(result, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
