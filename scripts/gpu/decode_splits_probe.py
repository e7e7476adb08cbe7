"""Decode attention below 64 lanes: flash-attn-4 (no split-KV on sm90) against flash-attn 2, kernels and engine.

Run from the repository root: python scripts/gpu/decode_splits_probe.py OUT_JSON
1. Kernels alone: 28 layers' store + decode in one CUDA graph at 1-64 lanes and contexts 128-4,096, with block tables
   as wide as the engine's (max_model_len 4,096): flash-attn 2's kvcache kernel (it splits the context over blocks
   of SMs) and flash-attn-4 as the engine calls it (flash-attn-4 4.0.0b36 refuses num_splits > 1 on sm90).
2. Engine decode TPOT at batch 1, 8, 32 after 128-token prompts and at batch 1, 8 after 2,000-token prompts: the
   backend with flash-attn 2's decode from 64 lanes (before 2026-12-04's change), 32 (after it), 16, and for every
   decode; each twice, alternating.
"""
import gc
import statistics
import sys

import torch

from nanoserve import LLM
from nanoserve.attention import flash4
from nanoserve.attention.flash import flash_functions, store_kv_triton
from probe_timing import graph_us, tpot_ms, random_qwen3_0_6b, write_result  # this script's folder

LAYERS, HQ, HKV, D, BS, WIDTH = 28, 16, 8, 128, 256, 16


def case(batch: int, ctx: int):
    """28 layers' caches and one decode step (every lane at context `ctx`), tables WIDTH wide padded with block 0."""
    per = -(-ctx // BS)
    caches = [(torch.randn(batch * per + 1, BS, HKV, D, device="cuda", dtype=torch.bfloat16),
               torch.randn(batch * per + 1, BS, HKV, D, device="cuda", dtype=torch.bfloat16)) for _ in range(LAYERS)]
    tables = torch.zeros(batch, WIDTH, device="cuda", dtype=torch.int32)
    tables[:, :per] = (torch.randperm(batch * per, device="cuda") + 1).view(batch, per).int()
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    slots = tables[:, (ctx - 1) // BS].long() * BS + (ctx - 1) % BS
    q = torch.randn(batch, HQ, D, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn(batch, HKV, D, device="cuda", dtype=torch.bfloat16), torch.randn_like(q[:, :HKV])
    return caches, tables, lens, slots, q, k, v


def kernels_alone(fa4) -> list:
    _, kvcache = flash_functions()
    rows = []
    for batch in (1, 4, 8, 16, 32, 64):
        for ctx in (128, 256, 1024, 4096):
            caches, tables, lens, slots, q, k, v = case(batch, ctx)

            def fa2(kc, vc):
                store_kv_triton(k, v, kc, vc, slots)
                return kvcache(q.unsqueeze(1), kc, vc, lens, tables)[0].squeeze(1)

            def fa4_call(kc, vc):
                store_kv_triton(k, v, kc, vc, slots)
                return fa4(q.unsqueeze(1), kc, vc, seqused_k=lens, page_table=tables, causal=True)[0].squeeze(1)
            variants = {"flash-attn 2": fa2, "flash-attn-4": fa4_call}
            expect = fa2(*caches[0]).float()
            row = {"batch": batch, "context": ctx}
            for name, fn in variants.items():
                diff = (fn(*caches[0]).float() - expect).abs().max().item()
                row[name] = {"us_per_layer": graph_us([(lambda f, c: lambda: f(*c))(fn, c) for c in caches], 50),
                             "max_abs_diff": diff}
            rows.append(row)
            print(f"batch {batch:2d} ctx {ctx:5d}: " + "  ".join(
                f"{n} {r['us_per_layer']:6.2f}" for n, r in row.items() if isinstance(r, dict)), flush=True)
            del caches
            torch.cuda.empty_cache()
    return rows


def engine_tpot(model) -> dict:
    cls = flash4.Flash4AttentionBackend
    setups = {f"flash-attn 2 from {n} lanes": {"flash2_decode_from": n} for n in (64, 32, 16)}
    setups["flash-attn 2 for all decode"] = {"flash2_decode_from": 1}
    rows = {}
    for name in [*setups, *(f"{n}, again" for n in setups)]:
        changes = setups[name.removesuffix(", again")]
        saved = {key: cls.__dict__[key] for key in changes}
        for key, value in changes.items():
            setattr(cls, key, value)
        llm = LLM(str(model), flash4_compile="startup", max_model_len=4096)
        rows[name] = {f"short b{b}": tpot_ms(llm, b) for b in (1, 8, 32)}
        rows[name].update({f"long b{b}": tpot_ms(llm, b, prompt_len=2000, out_len=128, runs=3) for b in (1, 8)})
        print(f"{name:30s} " + " ".join(f"{k} {statistics.median(v):.3f}" for k, v in rows[name].items()), flush=True)
        for key, value in saved.items():
            setattr(cls, key, value)
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/decode_splits.json"
    kernels = kernels_alone(flash4.flash4_attention())
    model = random_qwen3_0_6b()
    engine = engine_tpot(model)
    print("\nengine TPOT, median ms")
    for name, row in engine.items():
        print(f"{name:30s} " + " ".join(f"{k} {statistics.median(v):.3f}" for k, v in row.items()))
    config = {"model": "random weights, Qwen3-0.6B shapes", "dtype": "bfloat16", "max_model_len": 4096,
              "tpot": "(t(out_len tokens) - t(1 token)) / (out_len - 1); short: 128-token prompts, 256 out, 5 runs; "
                      "long: 2,000-token prompts, 128 out, 3 runs",
              "kernels": "16 q and 8 kv heads of 128, block 256, tables 16 wide, 28 layers per CUDA graph, 50 replays"}
    write_result(out, config, kernels=kernels, engine=engine)


if __name__ == "__main__":
    main()
