"""Do flash-attn-4's first-use compiles overlap on threads? Six kernel variants compiled one after another, then on
six threads, each in a fresh process with an empty kernel cache (the import is timed apart).

Run from the repository root with flash-attn-4 importable: python scripts/gpu/flash4_compile_probe.py [OUT_JSON]
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time


def variants():
    """Six calls with distinct compile keys, in the shapes nanoserve's flash4 backend passes (16 q / 8 kv heads)."""
    import torch
    from flash_attn.cute.interface import flash_attn_varlen_func as attn

    dev, bf = "cuda", torch.bfloat16
    blocks, page = 64, 256
    kv = lambda d: torch.randn(blocks, page, 8, d, device=dev, dtype=bf)  # noqa: E731
    cache = {d: (kv(d), kv(d)) for d in (64, 128)}
    table = torch.arange(8 * 4, device=dev, dtype=torch.int32).view(8, 4)
    used = torch.full((8,), 700, device=dev, dtype=torch.int32)
    cu = torch.arange(0, 8 * 64 + 1, 64, device=dev, dtype=torch.int32)

    def prefill(d, causal, lse):
        q = torch.randn(8 * 64, 16, d, device=dev, dtype=bf)
        return lambda: attn(q, *cache[d], cu_seqlens_q=cu, seqused_k=used, page_table=table, max_seqlen_q=64,
                            causal=causal, return_lse=lse)

    def decode(d, lse):
        q = torch.randn(8, 1, 16, d, device=dev, dtype=bf)
        return lambda: attn(q, *cache[d], seqused_k=used, page_table=table, causal=True, return_lse=lse)

    return {"prefill causal": prefill(128, True, False), "prefill causal lse": prefill(128, True, True),
            "prefill non-causal lse": prefill(128, False, True), "decode": decode(128, False),
            "decode lse": decode(128, True), "prefill causal hd64": prefill(64, True, False)}


def child(mode: str) -> dict:
    t = time.perf_counter()
    import torch
    import flash_attn.cute.interface  # noqa: F401
    imported = time.perf_counter() - t
    calls = variants()
    torch.cuda.synchronize()
    t = time.perf_counter()
    each = {}
    if mode == "serial":
        for name, call in calls.items():
            s = time.perf_counter()
            call()
            each[name] = time.perf_counter() - s
    else:
        def timed(item):
            s = time.perf_counter()
            item[1]()
            return item[0], time.perf_counter() - s
        with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
            each = dict(pool.map(timed, calls.items()))
    torch.cuda.synchronize()
    return {"mode": mode, "import_s": imported, "compile_all_s": time.perf_counter() - t, "each_s": each}


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2])))
        return
    rows = []
    for mode in ("serial", "threads", "serial", "threads"):
        env = dict(os.environ, FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED="1",
                   FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=tempfile.mkdtemp())  # empty: every variant compiles
        out = subprocess.run([sys.executable, __file__, "--child", mode], env=env, capture_output=True, text=True)
        row = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"mode": mode,
                                                                                             "error": out.stderr[-800:]}
        rows.append(row)
        print(mode, json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()
                                if k != "each_s"}), {k: round(v, 2) for k, v in row.get("each_s", {}).items()},
              flush=True)
    sys.path.insert(0, ".")
    from nanobench.provenance import collect_provenance, utc_now

    provenance = {**collect_provenance(), "date": utc_now(), "command": " ".join(["python", *sys.argv])}
    json.dump({"provenance": provenance, "rows": rows},
              open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/flash4_compile_probe.json", "w"), indent=1)


if __name__ == "__main__":
    main()
