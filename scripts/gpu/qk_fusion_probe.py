"""Chapter 10's q/k norm folded into the rotary launch, on one GPU: the kernels alone, then the engine's decode TPOT.

Run from the repository root: python scripts/gpu/qk_fusion_probe.py OUT_JSON
1. One layer's q/k norm + rotary as three launches (two RMSNorms, rotary) against one, in CUDA graphs over 28
   layers' worth of calls, and the two outputs compared.
2. LLM decode TPOT at batch 1, 8 and 32 with `FusedQwen3Attention` in `fuse_model`'s table and without it, alternating,
   twice each (the same engine otherwise: graphs, fused kernels, the default attention backend).
"""
import contextlib
import sys

import torch

import nanoserve.kernels.fused as fused
from nanoserve.model.qwen3 import Qwen3Attention
from probe_timing import (TPOT_CONFIG, compare_engines, graph_us, print_tpot_table,  # this script's folder
                          random_qwen3_0_6b, write_result)

REAL_SWAP = fused.fuse_model


def swap_without_attention(model):
    """fuse_model as it was before the q/k norm joined the rotary launch: Qwen3Attention keeps its class."""
    layers = [m for m in model.modules() if type(m) is Qwen3Attention]
    swapped = REAL_SWAP(model)
    for m in layers:
        m.__class__ = Qwen3Attention
    return swapped - len(layers)


def kernels_alone() -> list:
    """Three launches against one for Qwen3-0.6B's heads (16 q, 8 kv, 128), bf16, at several token counts."""
    rope_cos = torch.randn(4096, 128, device="cuda")
    rope_sin = torch.randn(4096, 128, device="cuda")
    rows = []
    for tokens in (1, 8, 32, 256, 2048):
        qkv = torch.randn(tokens, 32 * 128, device="cuda", dtype=torch.bfloat16)
        q, k = qkv[:, :2048].view(tokens, 16, 128), qkv[:, 2048:3072].view(tokens, 8, 128)
        qg = torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5
        kg = torch.rand(128, device="cuda", dtype=torch.bfloat16) + 0.5
        pos = torch.randint(0, 4096, (tokens,), device="cuda")
        three = lambda: fused.rotary(pos, fused.rms_norm(q, qg, 1e-6), fused.rms_norm(k, kg, 1e-6), rope_cos, rope_sin)
        one = lambda: fused.rotary(pos, q, k, rope_cos, rope_sin, (qg, kg, 1e-6))
        a, b = three(), one()
        diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))
        rows.append({"tokens": tokens, "three_launches_us": graph_us([three] * 28, 50),
                     "one_launch_us": graph_us([one] * 28, 50),
                     "max_abs_diff": diff, "bitwise_equal": all(torch.equal(x, y) for x, y in zip(a, b))})
        print(f"tokens {tokens:5d}: three launches {rows[-1]['three_launches_us']:7.2f} µs, one "
              f"{rows[-1]['one_launch_us']:7.2f} µs, max |diff| {diff:.3g}", flush=True)
    return rows


def engine_tpot(model) -> dict:
    runs = [(name, REAL_SWAP if name.startswith("one") else swap_without_attention, contextlib.nullcontext(), {})
            for name in ("separate", "one launch", "separate, again", "one launch, again")]
    rows, tokens = compare_engines(model, runs, [list(range(100, 164))])
    rows["same_greedy_tokens"] = tokens["separate"] == tokens["one launch"]
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/qk_fusion.json"
    kernels = kernels_alone()
    model = random_qwen3_0_6b()
    engine = engine_tpot(model)
    print_tpot_table(engine, "attention_class")
    print("same greedy tokens:", engine["same_greedy_tokens"])
    config = {**TPOT_CONFIG, "kernels": "16 q and 8 kv heads of 128, 28 calls per CUDA graph, 50 replays"}
    write_result(out, config, kernels=kernels, engine=engine)


if __name__ == "__main__":
    main()
