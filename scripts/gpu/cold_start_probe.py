"""Start -> ready of fresh engine processes on empty kernel caches (chapter 19 section 7): flash-attn-4 compiled at
start-up, against serving at once on flash-attn 2 while a background process compiles flash-attn-4 for the next
start, and that next start. Each start is a new process; each counts the flash-attn-4 and Triton kernels it compiled
and keeps its batch-1 decode time per token, measured once its background compile is done. Rounds alternate which
empty-cache start goes first (a machine's first process pays extra). Without flash-attn-4 both modes are the same
start: every Triton kernel compiled as the start meets it.

Run from the repository root with flash-attn 2 importable (and flash-attn-4, to include it):
ROUNDS=2 python scripts/gpu/cold_start_probe.py [OUT_JSON] [MODEL]  (MODEL: the random Qwen3-0.6B by default)."""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

START = """
import json, os, statistics, sys, time
t0 = float(sys.argv[1])
from pathlib import Path
from nanoserve import LLM
from nanoserve.attention.flash4 import kernel_cache_dir
sys.path.insert(0, "scripts/gpu")
from probe_timing import tpot_ms
flash4_kernels = lambda: len(list(kernel_cache_dir().rglob("*.o")))
triton_kernels = lambda: len(list(Path(os.environ["TRITON_CACHE_DIR"]).glob("*/__grp__*.json")))
before = flash4_kernels(), triton_kernels()
llm = LLM(sys.argv[2], dtype="bfloat16", max_model_len=4096, flash4_compile=sys.argv[3])
ready = time.time() - t0
compiled = flash4_kernels() - before[0], triton_kernels() - before[1]
job = llm.engine.kernel_compile
rc = job.wait() if job else None
compile_done = time.time() - t0 - ready
print(json.dumps({"backend": llm.config.attention_backend, "fused_kernels": llm.config.fused_kernels,
                  "process_ready_s": ready, "kernels_compiled_by_start": compiled[0],
                  "triton_kernels_compiled_by_start": compiled[1], "b1_tpot_ms": tpot_ms(llm, 1, runs=3),
                  "background_compile_rc": rc, "background_compile_s": compile_done if job else None}))
"""
CONFIG = {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
          "caches": "XDG_CACHE_HOME and TRITON_CACHE_DIR empty for each round's first starts",
          "process_ready_s": "from just before the process is spawned to the LLM built",
          "kernels_compiled_by_start": "flash-attn-4 object files the start added to its cache",
          "triton_kernels_compiled_by_start": "Triton kernels the start added to its cache",
          "b1_tpot_ms": "measured after the start's background compile finished"}


def start(model: str, mode: str, caches: str) -> dict:
    """One engine process on the kernel caches under `caches` (XDG and Triton)."""
    from probe_timing import fresh_process

    return {"mode": mode, **fresh_process(START, model, mode, caches=caches, timeout=300)}


def print_row(name: str, r: dict) -> None:
    if "error" in r:
        return print(f"{name:58s} ERROR {r['error'][-300:]}", flush=True)
    bg = "" if r["background_compile_s"] is None else f"{r['background_compile_s']:.1f}"
    print(f"{name:58s} {r['backend']:6s} {str(r['fused_kernels']):5s} {r['process_ready_s']:7.1f} "
          f"{r['triton_kernels_compiled_by_start']:6d} {r['kernels_compiled_by_start']:6d} "
          f"{statistics.median(r['b1_tpot_ms']):10.3f}  {bg}", flush=True)


def main():
    sys.path.insert(0, "scripts/gpu")
    from probe_timing import random_qwen3_0_6b, write_result

    model = sys.argv[2] if len(sys.argv) > 2 else random_qwen3_0_6b()
    from nanoserve.attention.flash4 import flash4_available

    if flash4_available():  # flash-attn-4's .pyc, as pip leaves them, before any start
        subprocess.run([sys.executable, "-c", "import flash_attn.cute.interface"], check=True,
                       env={**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp()})
    print(f"{'start':58s} attn   fused ready s triton flash4 b1 TPOT ms  background compile s")
    rows = {}
    for round_ in range(1, int(os.environ.get("ROUNDS", "2")) + 1):
        startup, background = tempfile.mkdtemp(), tempfile.mkdtemp()  # two empty cache folders
        empty = [("compiled at start-up, empty caches", "startup", startup),
                 ("first start, empty caches (background compile)", "background", background)]
        runs = (empty if round_ % 2 else empty[::-1]) + [
            ("next start, after the background compile", "background", background),
            ("compiled at start-up, warm caches", "startup", startup)]
        for name, mode, caches in runs:
            rows[f"{name}, round {round_}"] = start(model, mode, caches)
            print_row(f"{name}, round {round_}", rows[f"{name}, round {round_}"])
        log = Path(background) / "xdg/nanoserve/flash4/compile.log"
        compile_log = log.read_text()[-3000:] if log.exists() else "(no compile.log)"
        # after each round, so that a call's time limit keeps what ran
        write_result(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cold_start.json", CONFIG,
                     rows=rows, background_compile_log=compile_log)
    print("\nthe last background compile's log:\n" + compile_log)


if __name__ == "__main__":
    main()
