"""Decode TPOT at batch 1-8 with decode buckets from 1 lane (chapter 09's grid) and from 8 (the engine's), on one GPU.

Run from the repository root: python scripts/gpu/bucket_probe.py [BACKEND] [OUT_JSON] [MODEL]
(MODEL: a checkpoint or GGUF path; the random Qwen3-0.6B by default)."""
import gc
import statistics
import sys
import time
from pathlib import Path

import torch

import nanoserve.engine.selector as selector
from nanoserve import LLM
from probe_timing import TPOT_CONFIG, tpot_ms, random_qwen3_0_6b, write_result  # this script's folder


def main():
    model = sys.argv[3] if len(sys.argv) > 3 else random_qwen3_0_6b()
    backend = sys.argv[1] if len(sys.argv) > 1 else "auto"
    rows = {}
    for name, smallest in (("buckets from 1", 1), ("buckets from 8", 8), ("buckets from 1, again", 1),
                           ("buckets from 8, again", 8)):
        selector.DECODE_MIN_LANES = smallest  # read when the engine builds its graph variants
        t0 = time.perf_counter()
        llm = LLM(str(model), dtype="bfloat16", attention_backend=backend, flash4_compile="startup", max_model_len=4096)
        ready = time.perf_counter() - t0
        rows[name] = {"smallest": smallest, "ready_s": round(ready, 2),
                      "decode_buckets": sorted({b for v, b in llm.engine.executor.graphs if v == "decode"})}
        used = llm.engine.config.attention_backend_class.name
        for batch in (1, 2, 4, 8):
            t = tpot_ms(llm, batch)
            rows[name][batch] = t
            print(f"{name:26s} batch {batch}: TPOT {statistics.median(t):.3f} ms (min {min(t):.3f}, max {max(t):.3f})",
                  flush=True)
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    print("\nvariant                     ready    b=1    b=2    b=4    b=8   (median TPOT, ms)")
    for name, r in rows.items():
        print(f"{name:26s} {r['ready_s']:6.1f} " + " ".join(f"{statistics.median(r[b]):6.3f}" for b in (1, 2, 4, 8)))
    config = {**TPOT_CONFIG, "attention_backend": backend, "backend_used": used}
    if len(sys.argv) > 3:
        config["model"] = f"{Path(model).name}, bf16"
    write_result(sys.argv[2] if len(sys.argv) > 2 else "/tmp/bucket_probe.json", config, rows=rows)


if __name__ == "__main__":
    main()
