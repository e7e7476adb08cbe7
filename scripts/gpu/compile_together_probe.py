"""Start -> ready of fresh engine processes on empty Triton caches (chapter 10 section 9): chapter 10's variants
compiled as the steps meet them (the rehearsal off), rehearsed with one compile thread (the compiles one after
another, off the main thread) and with eight; then each again on its now warm cache. Each start is a new process; each counts the Triton
variants it compiled (in the rehearsal, and after it), times the rehearsal and its batch-1 decode. Rounds rotate
which arm goes first (a machine's first process pays extra).

Run from the repository root with flash-attn 2 importable:
ROUNDS=3 python scripts/gpu/compile_together_probe.py [OUT_JSON] [MODEL]  (MODEL: the random Qwen3-0.6B by default)."""
import os
import statistics
import sys
import tempfile

START = """
import json, os, sys, time
t0 = float(sys.argv[1])
from pathlib import Path
from nanoserve import LLM
from nanoserve.engine import selector
from nanoserve.kernels import fused
sys.path.insert(0, "scripts/gpu")
from probe_timing import tpot_ms
threads = int(sys.argv[3])
triton_kernels = lambda: len(list(Path(os.environ["TRITON_CACHE_DIR"]).glob("*/__grp__*.json")))
rehearsal = {}
def timed(runner, rehearse=selector.compile_variants):
    start, before = time.time(), triton_kernels()
    rehearse(runner)
    rehearsal.update(s=time.time() - start, compiled=triton_kernels() - before)
if threads:
    fused.COMPILE_THREADS = threads
    selector.compile_variants = timed
else:
    selector.compile_variants = lambda runner: None  # the start before section 9: each variant compiled as met
before = triton_kernels()
llm = LLM(sys.argv[2], dtype="bfloat16", max_model_len=4096, flash4_compile="startup")
ready = time.time() - t0
compiled = triton_kernels() - before
print(json.dumps({"backend": llm.config.attention_backend, "process_ready_s": ready, "threads": threads,
                  "rehearsal_s": rehearsal.get("s"), "compiled_in_rehearsal": rehearsal.get("compiled"),
                  "compiled_by_start": compiled, "b1_tpot_ms": tpot_ms(llm, 1, runs=3)}))
"""
ARMS = {"as met (no rehearsal)": 0, "rehearsed, 1 compile thread": 1, "rehearsed, 8 compile threads": 8}
CONFIG = {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
          "caches": "XDG_CACHE_HOME and TRITON_CACHE_DIR empty for each arm's first start of a round, the same "
                    "folder for its second",
          "process_ready_s": "from just before the process is spawned to the LLM built",
          "compiled_by_start": "Triton variants the start added to its cache (each a __grp__ file)",
          "arms": ARMS}


def print_row(name: str, r: dict) -> None:
    if "error" in r:
        return print(f"{name:48s} ERROR {r['error'][-400:]}", flush=True)
    rehearsal = "-" if r["rehearsal_s"] is None else f"{r['rehearsal_s']:.2f} ({r['compiled_in_rehearsal']})"
    print(f"{name:48s} {r['backend']:6s} {r['process_ready_s']:7.2f} {r['compiled_by_start']:6d} {rehearsal:>12s} "
          f"{statistics.median(r['b1_tpot_ms']):8.3f}", flush=True)


def main():
    sys.path.insert(0, "scripts/gpu")
    from probe_timing import fresh_process, random_qwen3_0_6b, write_result

    model = sys.argv[2] if len(sys.argv) > 2 else random_qwen3_0_6b()
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/compile_together.json"
    print(f"{'start':48s} attn   ready s  triton  rehearsal s  b1 TPOT ms")
    rows, names = {}, list(ARMS)
    for round_ in range(1, int(os.environ.get("ROUNDS", "3")) + 1):
        shift = (round_ - 1) % len(names)
        order = names[shift:] + names[:shift]
        caches = {name: tempfile.mkdtemp() for name in order}
        for warm in ("empty cache", "warm cache"):
            for name in order:
                key = f"{name}, {warm}, round {round_}"
                rows[key] = {"arm": name, "cache": warm, "round": round_,
                             **fresh_process(START, model, str(ARMS[name]), caches=caches[name], timeout=300)}
                print_row(key, rows[key])
                write_result(out, CONFIG, rows=rows)  # after each start, so that a call's time limit keeps what ran
    print("\nmedian start -> ready, s")
    for name in names:
        for warm in ("empty cache", "warm cache"):
            ready = [r["process_ready_s"] for r in rows.values()
                     if r["arm"] == name and r["cache"] == warm and "error" not in r]
            if ready:
                print(f"  {name:28s} {warm:12s} {statistics.median(ready):6.2f}  ({', '.join(f'{x:.2f}' for x in ready)})")


if __name__ == "__main__":
    main()
