"""Where a warm flash-attn-4 start spends its time (chapter 19 section 7): flash-attn-4's import alone in a fresh
process, then engine starts on warm kernel caches with the import's start and end stamped on the same clock as
ready, beside flash-attn 2's start.

Run from the repository root with flash-attn 2 and flash-attn-4 importable:
python scripts/gpu/warm_start_probe.py [OUT_JSON] [MODEL]  (MODEL: the random Qwen3-0.6B by default)."""
import sys
import tempfile

IMPORT_ALONE = """
import sys, time
t0 = float(sys.argv[1])
import torch
after_torch = time.time() - t0
import flash_attn.cute.interface
print(f'{{"torch_s": {after_torch}, "flash4_import_s": {time.time() - t0 - after_torch}}}')
"""

START = """
import importlib, json, sys, time
t0 = float(sys.argv[1])
stamps = {}
real = importlib.import_module


def timed(name, *args, **kwargs):
    if name == "flash_attn.cute.interface":
        stamps["flash4_import_from_s"] = time.time() - t0
        module = real(name, *args, **kwargs)
        stamps["flash4_import_until_s"] = time.time() - t0
        return module
    return real(name, *args, **kwargs)


importlib.import_module = timed  # the backend's helper thread imports through it
from nanoserve import LLM
stamps["nanoserve_imported_s"] = time.time() - t0
llm = LLM(sys.argv[2], dtype="bfloat16", max_model_len=4096, attention_backend=sys.argv[3])
stamps["ready_s"] = time.time() - t0
print(json.dumps({"backend": llm.config.attention_backend, **stamps}))
"""


def main():
    sys.path.insert(0, "scripts/gpu")
    from probe_timing import fresh_process, random_qwen3_0_6b, write_result

    def run(code: str, *args, caches: str) -> dict:
        return fresh_process(code, *args, caches=caches, timeout=200)

    model = sys.argv[2] if len(sys.argv) > 2 else random_qwen3_0_6b()
    caches = tempfile.mkdtemp()
    rows = {"import alone, first": run(IMPORT_ALONE, caches=caches),
            "flash4, empty caches (compiles)": run(START, model, "flash4", caches=caches),
            "import alone, again": run(IMPORT_ALONE, caches=caches)}
    for i in (1, 2):
        rows[f"flash4, warm caches ({i})"] = run(START, model, "flash4", caches=caches)
        rows[f"flash, warm caches ({i})"] = run(START, model, "flash", caches=caches)
    for name, row in rows.items():
        print(f"{name:36s} " + "  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in row.items()))
    write_result(sys.argv[1] if len(sys.argv) > 1 else "/tmp/warm_start.json",
                 {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
                  "clock": "seconds from just before the process is spawned",
                  "flash4_import": "flash_attn.cute.interface, imported on the backend's helper thread"},
                 rows=rows)


if __name__ == "__main__":
    main()
