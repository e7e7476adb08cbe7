"""The engine with decode_gemm_probe.py's Triton GEMM for steps of 33-256 rows, against cuBLAS and cuBLASLt.

Run from the repository root: python scripts/gpu/decode_gemm_engine_probe.py OUT_JSON [DECODE_GEMM_JSON]
Every `Linear` of the model (qkv, o, gate_up, down; Qwen3's head is not one) runs decode_gemm_probe.py's tile GEMM
when a step has more than 32 and at most 256 rows (smaller steps keep cuBLAS and chapter 10's split). Its tile is the
one that was best at 256 rows in DECODE_GEMM_JSON (decode_gemm_probe.py's result), where that beat cuBLAS; without
the file, 64 x 64 x 128 for every shape. A third arm prefers cuBLASLt to cuBLAS (torch's preferred BLAS library);
ARMS picks the arms (default "cuBLAS tiled cuBLASLt"). Engines built in turn, each arm twice, each timing a decode
step at 64 and 256 lanes (cached prompts of 592 tokens, T = 0.6) and nanobench's `random` workload (two runs after
a warm-up); greedy tokens (64 prompts, 32 tokens) compared with the first arm.
"""
import contextlib
import gc
import json
import os
import statistics
import sys

import torch

import nanoserve.model.layers as layers
from decode_gemm_probe import SHAPES, blas_library, triton_linear  # this script's folder
from probe_timing import (PROBE_ENGINE, decode_ms, decode_prompts, random_qwen3_0_6b, random_workload_tok_s,
                          write_result)

MIN_ROWS, MAX_ROWS = 33, 256
DEFAULT_TILE = (64, 64, 128, 4, 4)


def best_tiles(path: str | None) -> dict:
    """{(N, K): tile} per Linear (not the head) whose best tile beat cuBLAS at 256 rows; DEFAULT_TILE with no file."""
    if not path or not os.path.exists(path):
        return {shape: DEFAULT_TILE for name, shape in SHAPES.items() if name != "lm_head"}
    result = json.load(open(path))
    out = {}
    for name, rows in result["projections"].items():
        if name == "lm_head":
            continue
        n, k = result["provenance"]["config"]["shapes"][name]
        row = next(r for r in rows if r["rows"] == MAX_ROWS)
        if row["tiles"][row["best_tile"]]["us"] < row["cublas_us"]:
            out[(n, k)] = tuple(int(v) for v in row["best_tile"].split("x"))
    return out


@contextlib.contextmanager
def tiled_linears(tiles: dict):
    """Inside the block, Linear.forward runs the tile GEMM on CUDA bf16 steps of MIN_ROWS..MAX_ROWS rows."""
    real = layers.Linear.forward

    def forward(self, x):
        tile = tiles.get((self.out_features, self.in_features))
        if (tile is None or not x.is_cuda or x.dtype != torch.bfloat16 or self.bias is not None or x.dim() != 2
                or not x.is_contiguous() or not MIN_ROWS <= x.shape[0] <= MAX_ROWS or self.in_features % tile[2]):
            return real(self, x)
        return triton_linear(x, self.weight, tile)

    for (n, k), tile in tiles.items():  # compile before any graph capture: m % 16 == 0 and not
        for m in (40, 64):
            triton_linear(torch.zeros(m, k, device="cuda", dtype=torch.bfloat16),
                          torch.zeros(n, k, device="cuda", dtype=torch.bfloat16), tile)
    layers.Linear.forward = forward
    try:
        yield
    finally:
        layers.Linear.forward = real


def engine_arm(model: str, name: str, context) -> dict:
    """Build an engine inside `context`; decode steps at 64 and 256 lanes, the random workload, 64 greedy outputs."""
    from nanobench.engines import make_engine
    from nanoserve import SamplingParams

    with context:
        engine = make_engine("nanoserve", model, PROBE_ENGINE)
        llm = engine.llm
        prompts = decode_prompts()
        steps = {lanes: decode_ms(llm, prompts[:lanes], 65, runs=3, temperature=0.6) for lanes in (64, 256)}
        tok_s = random_workload_tok_s(engine)
        greedy = [o.outputs[0].token_ids for o in
                  llm.generate(prompts[:64], SamplingParams(max_tokens=32, temperature=0.0), use_tqdm=False)]
        llm.shutdown()
    del llm, engine
    gc.collect()
    torch.cuda.empty_cache()
    print(f"{name:>7}: decode step {statistics.median(steps[64]):.3f} ms at 64 lanes, "
          f"{statistics.median(steps[256]):.3f} ms at 256; random " + " ".join(f"{t:,.0f}" for t in tok_s) + " tok/s",
          flush=True)
    return {"arm": name, "decode_ms": steps, "random_tok_s": tok_s, "greedy": greedy}


def main(path: str, tiles_path: str | None = None) -> None:
    tiles = best_tiles(tiles_path)
    print("tiles:", {f"{n}x{k}": t for (n, k), t in tiles.items()}, flush=True)
    model = random_qwen3_0_6b()
    contexts = {"cuBLAS": contextlib.nullcontext, "tiled": lambda: tiled_linears(tiles),
                "cuBLASLt": lambda: blas_library("cublaslt")}
    names = os.environ.get("ARMS", "cuBLAS tiled cuBLASLt").split()
    arms = [engine_arm(model, name, contexts[name]()) for name in names * 2]
    base = arms[0]["greedy"]
    same = {f"{a['arm']} #{i // len(names) + 1}": sum(x == y for p, q in zip(a["greedy"], base) for x, y in zip(p, q))
            for i, a in enumerate(arms)}
    for a in arms:
        del a["greedy"]
    write_result(path, {"rows": [MIN_ROWS, MAX_ROWS], "tiles": {f"{n}x{k}": t for (n, k), t in tiles.items()},
                        "arms": names, "engine": "defaults, gpu_memory_utilization 0.8, arms in turn, twice",
                        "decode_step": "cached prompts of 592 tokens: (t(65) - t(1)) / 64, 3 times, T = 0.6",
                        "random": "nanobench's random workload, 2 runs after a warm-up, T = 0.6"},
                 engine=arms, greedy_tokens_equal_to_first_arm=same)
    print("\narm      ms/step 64 lanes  256 lanes  random tok/s")
    for a in arms:
        step_ms = {lanes: statistics.median(a["decode_ms"][lanes]) for lanes in (64, 256)}
        tok_s = " · ".join(f"{t:,.0f}" for t in a["random_tok_s"])
        print(f"{a['arm']:8s} {step_ms[64]:16.3f} {step_ms[256]:10.3f}  {tok_s}")
    print(f"greedy tokens equal to the first {names[0]} arm (of 64 x 32):", same)


if __name__ == "__main__":
    main(*sys.argv[1:])
