"""Small-batch decode in one Triton launch (split-KV, in-kernel combine, the KV store folded in) against flash-attn.

Run from the repository root: python scripts/gpu/split_decode_probe.py OUT_JSON
1. Kernels alone: 28 layers' store + decode attention in one CUDA graph, at batch 1, 8, 32 and contexts 128-4,096:
   the Triton store + flash-attn-4's decode (the engine's path below 64 lanes), the store + flash-attn 2's kvcache
   kernel, and split_decode at a few tile/split settings; outputs compared with flash-attn 2's, and again after 50
   replays (the kernel's counters must come back to zero).
2. Engine decode TPOT at batch 1, 8, 32: the default backend against the same backend whose decode below 64 lanes is
   split_decode, alternating, twice each.
"""
import gc
import statistics
import sys

import torch

from nanoserve import LLM, SamplingParams
from nanoserve.attention.flash import flash_functions, store_kv_triton
from probe_timing import (TPOT_CONFIG, graph_us, print_tpot_table, random_qwen3_0_6b,  # this script's folder
                          tpot_ms, write_result)
from split_decode import split_decode, splits_for

LAYERS, HQ, HKV, D, BS = 28, 16, 8, 128, 256


def case(batch: int, ctx: int):
    """28 layers' caches and one decode step's q/k/v, tables and slots (each lane at context `ctx`)."""
    per = -(-ctx // BS)
    caches = [(torch.randn(batch * per + 1, BS, HKV, D, device="cuda", dtype=torch.bfloat16),
               torch.randn(batch * per + 1, BS, HKV, D, device="cuda", dtype=torch.bfloat16)) for _ in range(LAYERS)]
    tables = (torch.randperm(batch * per, device="cuda") + 1).view(batch, per).int()
    lens = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
    slots = (tables[:, (ctx - 1) // BS].long() * BS + (ctx - 1) % BS)
    qkv = torch.randn(batch, (HQ + 2 * HKV) * D, device="cuda", dtype=torch.bfloat16)
    q = qkv[:, :HQ * D].view(batch, HQ, D)
    k, v = qkv[:, HQ * D:(HQ + HKV) * D].view(batch, HKV, D), qkv[:, (HQ + HKV) * D:].view(batch, HKV, D)
    return caches, tables, lens, slots, q, k, v


def kernels_alone(flash4) -> list:
    _, kvcache = flash_functions()
    counters = torch.zeros(4096, device="cuda", dtype=torch.int32)
    rows = []
    for batch in (1, 8, 32):
        for ctx in (128, 256, 1024, 4096):
            caches, tables, lens, slots, q, k, v = case(batch, ctx)
            variants = {}

            def fa2(kc, vc):
                store_kv_triton(k, v, kc, vc, slots)
                return kvcache(q.unsqueeze(1), kc, vc, lens, tables)[0].squeeze(1)
            variants["store + flash-attn 2"] = fa2
            if flash4 is not None:
                def fa4(kc, vc):
                    store_kv_triton(k, v, kc, vc, slots)
                    return flash4(q.unsqueeze(1), kc, vc, seqused_k=lens, page_table=tables, causal=True)[0].squeeze(1)
                variants["store + flash-attn-4"] = fa4
            auto = splits_for(batch, HKV)
            for name, splits, block_n in (("split auto, tile 32", auto, 32), ("split auto, tile 64", auto, 64),
                                          ("split 2x auto, tile 32", min(32, 2 * auto), 32),
                                          ("split auto/2, tile 32", max(1, auto // 2), 32)):
                variants[name] = (lambda s, n: lambda kc, vc: split_decode(
                    q, k, v, kc, vc, tables, lens, slots, counters, splits=s, block_n=n))(splits, block_n)
            expect = fa2(*caches[0]).float()
            row = {"batch": batch, "context": ctx, "auto_splits": auto}
            for name, fn in variants.items():
                got = fn(*caches[0]).float()
                us = graph_us([(lambda f, c: lambda: f(*c))(fn, c) for c in caches], 50) * LAYERS  # µs per layer x 28
                again = fn(*caches[0]).float()
                row[name] = {"us_per_layer": us / LAYERS, "max_abs_diff": (got - expect).abs().max().item(),
                             "after_replays_diff": (again - expect).abs().max().item()}
            row["counters_zero"] = int(counters.abs().sum().item()) == 0
            rows.append(row)
            print(f"batch {batch:2d} ctx {ctx:5d}: " + "  ".join(
                f"{n}: {r['us_per_layer']:.2f} µs ({r['max_abs_diff']:.3f}/{r['after_replays_diff']:.3f})"
                for n, r in row.items() if isinstance(r, dict)) + f"  counters zero: {row['counters_zero']}",
                flush=True)
            del caches
            torch.cuda.empty_cache()
    return rows


def patch_backend(cls):
    """`cls.forward` with decode below its flash-attn 2 threshold in split_decode (store folded in); returns undo."""
    original = cls.forward

    def forward(self, q, k, v, layer_idx, batch):
        limit = getattr(self, "flash2_decode_from", None) or 1 << 30
        if not (batch.is_decode and len(q) < limit):
            return original(self, q, k, v, layer_idx, batch)
        k_cache, v_cache = batch.kv_caches[layer_idx]
        if getattr(self, "_counters", None) is None:
            self._counters = torch.zeros(1 << 16, device=q.device, dtype=torch.int32)
        return split_decode(q, k, v, k_cache, v_cache, batch.block_tables, batch.context_lens, batch.slot_mapping,
                            self._counters)
    cls.forward = forward
    return lambda: setattr(cls, "forward", original)


def engine_tpot(model) -> dict:
    rows, tokens = {}, {}
    from nanoserve.engine.selector import attention_backends
    backend_cls = next(iter(attention_backends().values()))  # the one 'auto' picks
    for name in ("default", "split_decode", "default, again", "split_decode, again"):
        undo = patch_backend(backend_cls) if name.startswith("split") else (lambda: None)
        llm = LLM(str(model), flash4_compile="startup", max_model_len=4096)
        rows[name] = {"backend": backend_cls.name}
        for batch in (1, 8, 32):
            rows[name][batch] = tpot_ms(llm, batch)
            print(f"{name:20s} batch {batch:2d}: TPOT {statistics.median(rows[name][batch]):.3f} ms", flush=True)
        tokens[name] = [o.outputs[0].token_ids for o in llm.generate(
            [{"prompt_token_ids": list(range(100 + i, 164 + i))} for i in range(4)],
            SamplingParams(max_tokens=64, temperature=0.0), use_tqdm=False)]
        undo()
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    rows["same_greedy_tokens_of_4"] = sum(a == b for a, b in zip(tokens["default"], tokens["split_decode"]))
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/split_decode.json"
    try:
        from nanoserve.attention.flash4 import flash4_attention, flash4_available
        flash4 = flash4_attention() if flash4_available() else None
    except ImportError:
        flash4 = None
    kernels = kernels_alone(flash4)
    model = random_qwen3_0_6b()
    engine = engine_tpot(model)
    print_tpot_table(engine, "backend")
    print("same greedy tokens (of 4 prompts):", engine["same_greedy_tokens_of_4"])
    config = {**TPOT_CONFIG, "kernels": "16 q and 8 kv heads of 128, block 256, 28 layers per CUDA graph, 50 replays"}
    write_result(out, config, kernels=kernels, engine=engine)


if __name__ == "__main__":
    main()
