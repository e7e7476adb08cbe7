"""The start-up heap frozen (appendix A5's `gc.freeze()`) or not, on the throughput workloads, one engine.

Run ON THE GPU MACHINE from the repository root (flash-attn importable):
    python scripts/gpu/gc_freeze_probe.py [--out DIR] [--tag h200] [--blocks 4] [--churn-runs 4]
One LLM (random weights, exact Qwen3-0.6B shapes); blocks alternate frozen (as built) and thawed (`gc.unfreeze()`),
A B A B. Each block runs nanobench's `high-churn` workload --churn-runs times and `random` once (T = 0.6, fresh
prompt ids per run), recording each run's wall time and the time spent in the cycle collector, by generation
(`gc.callbacks`). Writes gc_freeze_<tag>.json with provenance and prints a table last.
"""
import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from probe_timing import PROBE_ENGINE  # this script's folder


class CollectorClock:
    """Wall time inside the cycle collector, per generation, from gc.callbacks."""

    def __init__(self):
        self._start, self.ms, self.count = None, {}, {}
        self.take()
        gc.callbacks.append(self)

    def __call__(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.ms[info["generation"]] += (time.perf_counter() - self._start) * 1e3
            self.count[info["generation"]] += 1

    def take(self) -> dict:
        """What was counted since the last take, and start again from zero."""
        out = {"ms": self.ms, "collections": self.count}
        self.ms, self.count = {0: 0.0, 1: 0.0, 2: 0.0}, {0: 0, 1: 0, 2: 0}
        return out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="gpu")
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--churn-runs", type=int, default=4)
    args = parser.parse_args()
    from nanobench.provenance import collect_provenance, command_line, utc_now
    from nanobench.engines import make_engine
    from nanobench.workloads import make_workload, redraw_ids
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config

    model = str(make_checkpoint_from_config(QWEN3_0_6B_CONFIG, Path(tempfile.mkdtemp()) / "q", with_tokenizer=False))
    engine = make_engine("nanoserve", model, PROBE_ENGINE)
    frozen_at_start = gc.get_freeze_count()
    clock = CollectorClock()
    work = {name: make_workload(name) for name in ("high-churn", "random")}

    def run(name: str, seed: int) -> dict:
        prepared = engine.prepare(redraw_ids(work[name], seed=seed), 0.6)
        engine.reset_prefix_cache()
        clock.take()  # the collector's time during generate alone, not during the prepare
        t0 = time.perf_counter()
        tokens = sum(engine.run(prepared))
        wall = time.perf_counter() - t0
        return {"workload": name, "wall_s": wall, "tok_s": tokens / wall, "collector": clock.take(),
                "tracked": len(gc.get_objects())}

    run("high-churn", 1), run("random", 2)  # warm-up
    blocks, seed = [], 10
    for b in range(args.blocks):
        arm = "frozen" if b % 2 == 0 else "thawed"
        gc.freeze() if arm == "frozen" else gc.unfreeze()
        runs = []
        for _ in range(args.churn_runs):
            seed += 1
            runs.append(run("high-churn", seed))
        seed += 1
        runs.append(run("random", seed))
        blocks.append({"arm": arm, "frozen_objects": gc.get_freeze_count(), "runs": runs})
        print(f"{arm}: high-churn " + " ".join(f"{r['tok_s']:,.0f}" for r in runs[:-1])
              + f" tok/s (gen-2 ms " + " ".join(f"{r['collector']['ms'][2]:.0f}" for r in runs[:-1])
              + f"); random {runs[-1]['tok_s']:,.0f} tok/s (gen-2 ms {runs[-1]['collector']['ms'][2]:.0f})", flush=True)
    engine.llm.shutdown()
    result = {"date": utc_now(), "command": command_line(sys.argv), "provenance": collect_provenance(),
              "config": {"model": "random weights, exact Qwen3-0.6B shapes", "temperature": 0.6,
                         "engine": "defaults, gpu_memory_utilization 0.8, max_model_len 4096",
                         "arms": "frozen: gc.freeze() at the start of the block (what LLM() froze, plus what earlier "
                                 "blocks left alive); thawed: gc.unfreeze()", "order": "blocks alternate, frozen first"},
              "frozen_at_start": frozen_at_start, "blocks": blocks}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"gc_freeze_{args.tag}.json").write_text(json.dumps(result, indent=1))
    print("\narm | high-churn tok/s: median, min | gen-2 collections, ms in them | random tok/s")
    for arm in ("frozen", "thawed"):
        churn = [r for b in blocks if b["arm"] == arm for r in b["runs"] if r["workload"] == "high-churn"]
        rand = [r for b in blocks if b["arm"] == arm for r in b["runs"] if r["workload"] == "random"]
        print(f"{arm} | {statistics.median(r['tok_s'] for r in churn):,.0f}, {min(r['tok_s'] for r in churn):,.0f} | "
              f"{sum(r['collector']['collections'][2] for r in churn + rand)}, "
              f"{sum(r['collector']['ms'][2] for r in churn + rand):.0f} | "
              + " ".join(f"{r['tok_s']:,.0f}" for r in rand))


if __name__ == "__main__":
    main()
