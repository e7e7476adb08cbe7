"""Chapter 10's KV store inside the rotary launch, and cuBLAS switches for the small-M projections, on one GPU.

Run from the repository root: python scripts/gpu/store_fold_probe.py OUT_JSON
1. The q/k norm + rotary launch followed by chapter 08's store launch, against the one launch that also stores,
   with Qwen3-0.6B's heads, in CUDA graphs of 28 calls (as in a step); outputs and caches compared bit for bit.
2. The four projections of a layer at 1, 8 and 32 rows over 28 weight copies (more than L2 holds), with cuBLAS as
   torch calls it, with bf16 reduced-precision reductions refused (cuBLAS may then pick kernels without a split-K
   reduce), and through cuBLASLt.
3. LLM decode TPOT at batch 1, 8 and 32 with the store in the rotary launch and without it, alternating, twice
   each; then, if a switch of part 2 saved time per step, the engine with that switch on.
"""
import contextlib
import sys

import torch
import torch.nn.functional as F

import nanoserve.kernels.fused as fused
from nanoserve.attention.flash import store_kv_triton
from nanoserve.model.qwen3 import Qwen3Attention
from probe_timing import (TPOT_CONFIG, compare_engines, graph_us, print_tpot_table,  # this script's folder
                          random_qwen3_0_6b, write_result)

REAL_SWAP = fused.fuse_model
SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}


class StoreApart(fused.FusedQwen3Attention):
    """The fused attention before the store joined the rotary launch: chapter 01's attend, the backend stores."""

    attend = Qwen3Attention.attend


def swap_store_apart(model):
    """fuse_model, then the attention of every layer as it was before this change."""
    swapped = REAL_SWAP(model)
    for m in model.modules():
        if type(m) is fused.FusedQwen3Attention:
            m.__class__ = StoreApart
    return swapped


def kernels_alone() -> list:
    """Two launches (rotary with q/k norms, then the store) against one, bf16, Qwen3-0.6B's heads."""
    cos, sin = torch.randn(4096, 128, device="cuda"), torch.randn(4096, 128, device="cuda")
    norms = (torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5,
             torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5, 1e-6)
    rows = []
    for tokens in (1, 8, 32, 256, 2048):
        qkv = torch.randn(tokens, 32 * 128, device="cuda", dtype=torch.bfloat16)
        q, k, v = (x.unflatten(-1, (-1, 128)) for x in qkv.split([2048, 1024, 1024], -1))
        pos = torch.randint(0, 4096, (tokens,), device="cuda")
        slots = torch.randperm(64 * 256, device="cuda")[:tokens]
        two_caches = torch.zeros(2, 64, 256, 8, 128, device="cuda", dtype=torch.bfloat16)
        one_caches = two_caches.clone()

        def two():
            q_out, k_out = fused.rotary(pos, q, k, cos, sin, norms)
            store_kv_triton(k_out, v, two_caches[0], two_caches[1], slots)
            return q_out

        one = lambda: fused.rotary(pos, q, k, cos, sin, norms, (v, one_caches[0], one_caches[1], slots))[0]
        same = torch.equal(two(), one()) and torch.equal(two_caches, one_caches)
        rows.append({"tokens": tokens, "two_launches_us": graph_us([two] * 28, 50),
                     "one_launch_us": graph_us([one] * 28, 50), "bitwise_equal": same})
        print(f"tokens {tokens:5d}: rotary + store {rows[-1]['two_launches_us']:6.2f} µs, one launch "
              f"{rows[-1]['one_launch_us']:6.2f} µs, equal: {same}", flush=True)
    return rows


@contextlib.contextmanager
def blas(switch: str):
    """cuBLAS as torch calls it ("default"), without bf16 reduced-precision reductions, or through cuBLASLt."""
    matmul = torch.backends.cuda.matmul
    old_reduce, old_lib = matmul.allow_bf16_reduced_precision_reduction, torch.backends.cuda.preferred_blas_library()
    if switch == "no bf16 reduction":
        matmul.allow_bf16_reduced_precision_reduction = False
    elif switch == "cublaslt":
        torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        yield
    finally:
        matmul.allow_bf16_reduced_precision_reduction = old_reduce
        torch.backends.cuda.preferred_blas_library(old_lib)


SWITCHES = ("default", "no bf16 reduction", "cublaslt")


def projections() -> dict:
    """µs per projection call, by switch, shape and rows; and µs per decode step's 112 projections."""
    out = {}
    weights = {name: [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(28)]
               for name, (n, k) in SHAPES.items()}
    for switch in SWITCHES:
        with blas(switch):
            for rows in (1, 8, 32):
                for name, ws in weights.items():
                    x = torch.randn(rows, ws[0].shape[1], device="cuda", dtype=torch.bfloat16)
                    us = graph_us([lambda w=w: F.linear(x, w) for w in ws], 20)
                    out.setdefault(switch, {}).setdefault(str(rows), {})[name] = us
                step = 28 * sum(out[switch][str(rows)].values())
                out[switch][str(rows)]["step_us"] = step
                print(f"{switch:18s} rows {rows:2d}: " + " ".join(f"{n} {out[switch][str(rows)][n]:5.2f}"
                                                                  for n in SHAPES) + f" | step {step:6.1f} µs", flush=True)
    return out


def engine_tpot(model, best_switch) -> dict:
    runs = [(name, swap_store_apart if name.startswith("store apart") else REAL_SWAP, blas("default"),
             {"blas": "default"})
            for name in ("store apart", "store in rotary", "store apart, again", "store in rotary, again")]
    if best_switch != "default":
        runs.append((f"store in rotary, {best_switch}", REAL_SWAP, blas(best_switch), {"blas": best_switch}))
    rows, tokens = compare_engines(model, runs, [list(range(100, 164)), list(range(500, 900))])
    rows["same_greedy_tokens"] = tokens["store apart"] == tokens["store in rotary"]
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/store_fold.json"
    kernels = kernels_alone()
    blas_us = projections()
    saving = {s: blas_us["default"]["8"]["step_us"] - blas_us[s]["8"]["step_us"] for s in SWITCHES}
    best = max(saving, key=saving.get)
    best = best if saving[best] > 10 else "default"  # a switch must save 10 µs per step at 8 rows to be tried
    print("projection µs saved per step at 8 rows:", {s: round(v, 1) for s, v in saving.items()}, "->", best)
    model = random_qwen3_0_6b()
    engine = engine_tpot(model, best)
    print_tpot_table(engine, "blas")
    print("same greedy tokens (store apart vs in rotary):", engine["same_greedy_tokens"])
    config = {**TPOT_CONFIG, "kernels": "16 q and 8 kv heads of 128, 28 calls per CUDA graph, 50 replays",
              "projections": "Qwen3-0.6B's four projections, 28 weight copies per CUDA graph, 20 replays"}
    write_result(out, config, kernels=kernels, projections=blas_us, engine=engine)


if __name__ == "__main__":
    main()
