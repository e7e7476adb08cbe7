"""Start -> ready of fresh engine processes on empty kernel caches (chapter 19 section 7): flash-attn-4 compiled at
start-up, against serving at once on flash-attn 2 while a background process compiles flash-attn-4 for the next
start, and that next start. Each start is a new process; each keeps its batch-1 decode time per token.

Run from the repository root with flash-attn 2 and flash-attn-4 importable:
python scripts/gpu/cold_start_probe.py [OUT_JSON] [MODEL]  (MODEL: the random Qwen3-0.6B by default)."""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

START = """
import json, statistics, sys, time
t0 = float(sys.argv[1])
from nanoserve import LLM
from nanoserve.attention.flash4 import kernel_cache_dir
sys.path.insert(0, "scripts/gpu")
from probe_timing import tpot_ms
kernels = lambda: len(list(kernel_cache_dir().rglob("*.o")))
before = kernels()
llm = LLM(sys.argv[2], dtype="bfloat16", max_model_len=4096, flash4_compile=sys.argv[3])
ready = time.time() - t0
at_ready = kernels() - before
tpot = tpot_ms(llm, 1, runs=3)
job, waited = llm.engine.kernel_compile, time.time()
rc = job.wait() if job else None
print(json.dumps({"backend": llm.config.attention_backend, "process_ready_s": ready, "kernels_compiled_by_start":
                  at_ready, "b1_tpot_ms": tpot, "background_compile_rc": rc,
                  "background_compile_s": time.time() - t0 - ready if job else None,
                  "background_compile_waited_s": time.time() - waited if job else None}))
"""


def start(model: str, mode: str, caches: str) -> dict:
    """One engine process on the kernel caches under `caches` (XDG and Triton)."""
    from probe_timing import fresh_process

    return {"mode": mode, **fresh_process(START, model, mode, caches=caches, timeout=300)}


def main():
    sys.path.insert(0, "scripts/gpu")
    from probe_timing import random_qwen3_0_6b, write_result

    model = sys.argv[2] if len(sys.argv) > 2 else random_qwen3_0_6b()
    subprocess.run([sys.executable, "-c", "import flash_attn.cute.interface"], check=True,  # .pyc, as pip leaves them
                   env={**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp()})
    startup, background = tempfile.mkdtemp(), tempfile.mkdtemp()  # two empty cache folders
    rows = {"flash-attn-4 compiled at start-up, empty caches": start(model, "startup", startup),
            "first start, empty caches (background compile)": start(model, "background", background),
            "next start, after the background compile": start(model, "background", background),
            "flash-attn-4 compiled at start-up, warm caches": start(model, "startup", startup)}
    print(f"\n{'start':50s} backend  ready s  compiled  b1 TPOT ms  background compile s")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:50s} ERROR {r['error'][-300:]}")
            continue
        bg = "" if r["background_compile_s"] is None else f"{r['background_compile_s']:.1f}"
        print(f"{name:50s} {r['backend']:7s} {r['process_ready_s']:7.1f} {r['kernels_compiled_by_start']:9d} "
              f"{statistics.median(r['b1_tpot_ms']):10.3f}  {bg}")
    log = Path(background) / "xdg/nanoserve/flash4/compile.log"
    compile_log = log.read_text()[-3000:] if log.exists() else "(no compile.log)"
    print("\nthe background compile's log:\n" + compile_log)
    write_result(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cold_start.json",
                 {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
                  "caches": "XDG_CACHE_HOME and TRITON_CACHE_DIR empty for each first start",
                  "process_ready_s": "from just before the process is spawned to the LLM built",
                  "kernels_compiled_by_start": "flash-attn-4 object files the start added to its cache"},
                 rows=rows, background_compile_log=compile_log)


if __name__ == "__main__":
    main()
