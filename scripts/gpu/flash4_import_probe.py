"""flash-attn-4's import alone, as the library leaves it and through nanoserve's import_flash4 (chapter 19 section 8):
fresh processes in turn, each timing `import torch` and then the import, and saying whether torch._dynamo got loaded.

Run from the repository root with flash-attn-4 importable:
python scripts/gpu/flash4_import_probe.py [OUT_JSON] [REPS]"""
import statistics
import sys
import tempfile

IMPORT = """
import importlib, json, sys, time
t0 = time.time()
import torch
torch_s = time.time() - t0
from nanoserve.attention import flash4  # (untimed: both arms import it first)
t1 = time.time()
{statement}
print(json.dumps({{"torch_s": torch_s, "flash4_import_s": time.time() - t1,
                  "torch_dynamo_loaded": "torch._dynamo" in sys.modules, "sympy_loaded": "sympy" in sys.modules}}))
"""
WATCH = ("flash_attn.cute.interface", "cutlass", "quack", "quack.autotuner", "torch._dynamo", "sympy")


def import_times(statement: str) -> dict:
    """Cumulative seconds of the WATCH modules in one fresh process under `python -X importtime` (first listing)."""
    import re
    import subprocess
    import time

    code = IMPORT.format(statement=statement)
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code, str(time.time())], capture_output=True,
                          text=True, timeout=200)
    found = {}
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        if m and m.group(2) in WATCH:
            found.setdefault(m.group(2), int(m.group(1)) / 1e6)
    return found


ARMS = {"the library as it is": 'importlib.import_module("flash_attn.cute.interface")',
        "import_flash4 (compiler marks skipped)": "flash4.import_flash4()"}


def machine() -> str:
    """The GPU's name, or the CPU count where there is none (flash-attn-4 imports on a CPU; its kernels cannot run)."""
    import os

    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU only, {os.cpu_count()} cores"


def main():
    sys.path.insert(0, "scripts/gpu")
    from probe_timing import fresh_process, write_result

    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    caches = tempfile.mkdtemp()
    fresh_process(IMPORT.format(statement=ARMS["the library as it is"]), caches=caches, timeout=200)  # writes .pyc
    rows = {name: [] for name in ARMS}
    for _ in range(reps):
        for name, statement in ARMS.items():
            rows[name].append(fresh_process(IMPORT.format(statement=statement), caches=caches, timeout=200))
    print(f"\n{'import':40s} flash-attn-4 import s (runs)          torch s   torch._dynamo loaded")
    for name, runs in rows.items():
        ok = [r for r in runs if "error" not in r]
        if len(ok) < len(runs):
            print(f"{name:40s} ERROR {next(r for r in runs if 'error' in r)['error'][-600:]}")
        if ok:
            times = [r["flash4_import_s"] for r in ok]
            print(f"{name:40s} {statistics.median(times):5.2f} ({' '.join(f'{t:.2f}' for t in times)})"
                  f"   {statistics.median(r['torch_s'] for r in ok):5.2f}   {[r['torch_dynamo_loaded'] for r in ok]}")
    breakdown = {name: import_times(statement) for name, statement in ARMS.items()}
    for name, found in breakdown.items():
        print(f"{name:40s} -X importtime, cumulative s: " + ", ".join(f"{m} {t:.2f}" for m, t in found.items()))
    write_result(sys.argv[1] if len(sys.argv) > 1 else "/tmp/flash4_import.json",
                 {"machine": machine(), "what": "flash_attn.cute.interface imported in a fresh process after torch and nanoserve's "
                          "flash4 module, the arms in turn", "reps": reps, "arms": ARMS,
                  "importtime": "one more process per arm under python -X importtime: cumulative seconds of "
                                "the modules watched (a module's first listing)"}, rows=rows, importtime=breakdown)


if __name__ == "__main__":
    main()
