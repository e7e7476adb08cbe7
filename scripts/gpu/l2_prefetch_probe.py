"""Weights into L2 ahead of their projections at small batch: what a projection gains when its weight is already in
L2, and whether a prefetch issued a few kernels earlier puts it there, on one GPU.

Run from the repository root: python scripts/gpu/l2_prefetch_probe.py OUT_JSON
1. Each projection of a layer at 1 and 8 rows, in CUDA graphs of 28 calls: weights cold (28 copies, more than L2
   holds) and hot (one copy, 28 times).
2. One layer's decode step as a stand-in, over 28 weight copies: qkv, a spin for attention, o, a spin for the norm,
   gate_up, a spin for SiLU, down; as is, and with one launch at the layer's start that prefetches its o, gate_up
   and down weights into L2 (bulk prefetches of 16 KiB, or one prefetch per 128-byte line), on the layer's stream
   or (side) on a side stream forked from it and joined when the layer ends.
3. LLM decode TPOT at batch 1, 8 and 32: the engine as is, and with each decoder layer launching the side-stream
   prefetch first (its own o, gate_up and down; then also the next layer's qkv), engines in turn, twice. (The
   in-stream variant's engine rows, measured first: results/checks/l2_prefetch_h100_2026-12-06/in_stream.json.)
"""
import contextlib
import statistics
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import nanoserve.kernels.fused as fused
from nanoserve.model.qwen3 import Qwen3DecoderLayer
from probe_timing import (TPOT_CONFIG, compare_engines, graph_us, print_tpot_table,  # this script's folder
                          random_qwen3_0_6b, write_result)

REAL_SWAP = fused.fuse_model
SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)}
BULK, LINE, LANES = 16384, 128, 64


@triton.jit
def prefetch_kernel(p0, n0, p1, n1, p2, n2, p3, n3, STEP: tl.constexpr, BULK_OP: tl.constexpr, LANES: tl.constexpr):
    """Program (i, j) asks L2 for LANES pieces of STEP bytes of tensor j, starting at piece i * LANES."""
    j = tl.program_id(1)
    ptr = tl.where(j == 0, p0, tl.where(j == 1, p1, tl.where(j == 2, p2, p3))).to(tl.pointer_type(tl.int8))
    n = tl.where(j == 0, n0, tl.where(j == 1, n1, tl.where(j == 2, n2, n3)))
    offs = (tl.program_id(0) * LANES + tl.arange(0, LANES)).to(tl.int64) * STEP
    live = (offs < n).to(tl.int32)
    if BULK_OP:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $3; mov.u32 $0, 0; }",
            "=r,l,r,r", [ptr + offs, live, tl.full([LANES], STEP, tl.int32)], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0; }",
            "=r,l,r", [ptr + offs, live], dtype=tl.int32, is_pure=False, pack=1)


def l2_prefetch(tensors: list, mode: str = "bulk") -> None:
    """One launch asking L2 for up to four contiguous tensors (their bytes rounded down to 16)."""
    step = BULK if mode == "bulk" else LINE
    args, longest = [], 0
    for t in (tensors + tensors[:1] * 4)[:4]:
        n = t.numel() * t.element_size() // 16 * 16
        args += [t, n]
        longest = max(longest, n)
    grid = (triton.cdiv(longest, step * LANES), 4)
    prefetch_kernel[grid](*args, STEP=step, BULK_OP=mode == "bulk", LANES=LANES, num_warps=LANES // 32)


@triton.jit
def clock_ticks(lane):
    """The SM's cycle counter (one asm call per lane, reduced to one number)."""
    return tl.max(tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [lane], dtype=tl.int64, is_pure=False,
                                            pack=1), 0)


@triton.jit
def spin_kernel(out_ptr, cycles):
    """One warp waits `cycles` clock ticks: a stand-in for a latency-bound kernel that reads little."""
    lane = tl.arange(0, 32)
    start = clock_ticks(lane)
    now = start
    while now - start < cycles:
        now = clock_ticks(lane)
    tl.store(out_ptr + lane, (now - start).to(tl.int32) + lane * 0)


SPIN_OUT, SIDE = None, None


def prefetch_ahead(tensors: list, mode: str) -> None:
    """l2_prefetch on the current stream ("bulk", "line"), or ("side") bulk on a side stream forked from it."""
    if mode != "side":
        return l2_prefetch(tensors, mode)
    SIDE.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(SIDE):
        l2_prefetch(tensors, "bulk")


def join_side() -> None:
    torch.cuda.current_stream().wait_stream(SIDE)


def spin(cycles: int) -> None:
    spin_kernel[(1,)](SPIN_OUT, cycles, num_warps=1)


def hot_cold() -> list:
    """µs per projection call with its weight cold (28 copies) and hot (one copy), at 1 and 8 rows."""
    rows = []
    for name, (n, k) in SHAPES.items():
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(28)]
        for m in (1, 8):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cold = graph_us([lambda w=w: F.linear(x, w) for w in ws], 50)
            hot = graph_us([lambda: F.linear(x, ws[0])] * 28, 50)
            rows.append({"shape": name, "rows": m, "cold_us": cold, "hot_us": hot})
            print(f"{name:8s} rows {m}: cold {cold:6.2f} µs, hot {hot:6.2f} µs", flush=True)
    return rows


def layer_stand_in(spins: dict) -> dict:
    """µs per layer of the stand-in over 28 weight copies at 8 rows, without and with the prefetch launch."""
    weights = [{name: torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for name, (n, k) in SHAPES.items()}
               for _ in range(28)]
    x1, x2, x3 = (torch.randn(8, k, device="cuda", dtype=torch.bfloat16) for k in (1024, 2048, 3072))

    def layer(w, mode):
        if mode:
            prefetch_ahead([w["o"], w["gate_up"], w["down"]], mode)
        F.linear(x1, w["qkv"])
        spin(spins["attention"])
        F.linear(x2, w["o"])
        spin(spins["norm"])
        F.linear(x1, w["gate_up"])
        spin(spins["norm"])
        F.linear(x3, w["down"])
        if mode == "side":
            join_side()

    out = {}
    for rep in range(2):
        for mode in (None, "bulk", "line", "side"):
            us = graph_us([lambda w=w: layer(w, mode) for w in weights], 50)
            out.setdefault(mode or "none", []).append(us)
            print(f"stand-in layer, prefetch {mode or 'none':5s}: {us:6.2f} µs", flush=True)
    prefetch_alone = {mode: graph_us([lambda w=w: l2_prefetch([w["o"], w["gate_up"], w["down"]], mode)
                                      for w in weights], 50) for mode in ("bulk", "line")}
    print("prefetch launch alone, µs:", {k: round(v, 2) for k, v in prefetch_alone.items()}, flush=True)
    return {"per_layer_us": out, "prefetch_launch_us": prefetch_alone}


def calibrate_spins() -> dict:
    """Clock ticks for spins of about 8 µs (attention at batch 1) and 1.5 µs (a norm), measured in a graph."""
    ticks = 20000
    us = graph_us([lambda: spin(ticks)] * 28, 20)
    per_us = ticks / us
    spins = {"attention": int(8 * per_us), "norm": int(1.5 * per_us)}
    print(f"spin: {ticks} ticks = {us:.2f} µs -> {spins}", flush=True)
    return spins


def with_prefetch(next_qkv: bool, mode: str):
    """fuse_model, then each decoder layer launching one prefetch of its o, gate_up and down weights first (and the
    next layer's qkv when `next_qkv`); with mode "side" on a side stream, joined when the layer ends."""
    def swap(model):
        swapped = REAL_SWAP(model)
        layers = [m for m in model.modules() if isinstance(m, Qwen3DecoderLayer)]
        for i, layer in enumerate(layers):
            targets = [layer.self_attn.o_proj.weight, layer.mlp.gate_up_proj.weight, layer.mlp.down_proj.weight]
            if next_qkv and i + 1 < len(layers):
                targets.append(layers[i + 1].self_attn.qkv_proj.weight)

            def forward(positions, hidden, residual, batch=None, _forward=layer.forward, _targets=targets):
                prefetch_ahead(_targets, mode)
                out = _forward(positions, hidden, residual, batch)
                if mode == "side":
                    join_side()
                return out

            layer.forward = forward
        return swapped
    return swap


def main():
    global SPIN_OUT, SIDE
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/l2_prefetch.json"
    SPIN_OUT, SIDE = torch.zeros(32, device="cuda", dtype=torch.int32), torch.cuda.Stream()
    projections = hot_cold()
    spins = calibrate_spins()
    stand_in = layer_stand_in(spins)
    model = random_qwen3_0_6b()
    runs = []
    for again in ("", ", again"):
        runs += [(f"as is{again}", REAL_SWAP, contextlib.nullcontext(), {"prefetch": "none"}),
                 (f"side prefetch o+mlp{again}", with_prefetch(False, "side"), contextlib.nullcontext(),
                  {"prefetch": "o, gate_up, down, side stream"}),
                 (f"side prefetch o+mlp+next qkv{again}", with_prefetch(True, "side"), contextlib.nullcontext(),
                  {"prefetch": "o, gate_up, down, next qkv, side stream"})]
    engine, tokens = compare_engines(model, runs, [list(range(100, 164)), list(range(500, 900))])
    engine["same_greedy_tokens"] = len({str(t) for t in tokens.values()}) == 1
    print_tpot_table(engine, "prefetch")
    print("same greedy tokens in every engine:", engine["same_greedy_tokens"])
    print("\nprojection   rows  cold µs  hot µs")
    for r in projections:
        print(f"{r['shape']:10s} {r['rows']:5d} {r['cold_us']:8.2f} {r['hot_us']:7.2f}")
    medians = {k: round(statistics.median(v), 2) for k, v in stand_in["per_layer_us"].items()}
    print("stand-in layer µs (medians):", medians)
    config = {**TPOT_CONFIG, "projections": "Qwen3-0.6B's four projections, CUDA graphs of 28 calls, 50 replays",
              "prefetch": f"bulk: cp.async.bulk.prefetch.L2 of {BULK} bytes per lane; line: prefetch.global.L2 per "
                          f"{LINE} bytes; {LANES} lanes per program"}
    write_result(out, config, projections=projections, spins=spins, stand_in=stand_in, engine=engine)


if __name__ == "__main__":
    main()
