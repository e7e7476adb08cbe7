"""What chapter 10 section 8's split projections add to a start on empty Triton caches: fresh engine processes, each
on its own empty cache, split (the default) and with SPLIT_MAX_ROWS = 0, in turn; process start -> ready.

Run from the repository root with flash-attn 2 importable: python scripts/gpu/split_cold_start_probe.py [OUT_JSON]
"""
import json
import sys
import tempfile

sys.path.insert(0, "scripts/gpu")
from probe_timing import fresh_process, random_qwen3_0_6b  # noqa: E402  (this script's folder)

START = """
import json, sys, time
t0 = float(sys.argv[1])
import nanoserve.kernels.fused as fused
fused.SPLIT_MAX_ROWS = int(sys.argv[3])
from nanoserve import LLM
llm = LLM(sys.argv[2], dtype="bfloat16", max_model_len=4096)
print(json.dumps({"split_max_rows": fused.SPLIT_MAX_ROWS, "process_ready_s": time.time() - t0,
                  "backend": llm.config.attention_backend}))
"""


def main():
    model = random_qwen3_0_6b()
    runs = []
    for rows in (16, 0, 16, 0):  # alternating; the first start also pays the cold page cache
        with tempfile.TemporaryDirectory() as caches:
            runs.append(fresh_process(START, model, str(rows), caches=caches, timeout=120))
        print(json.dumps(runs[-1]), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"command": " ".join(["python", *sys.argv]), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
