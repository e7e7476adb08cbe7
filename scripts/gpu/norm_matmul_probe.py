"""The RMSNorm before `qkv` and `gate_up` folded into the projection at small batch: one Triton launch instead of
two, measured against the engine's separate norm kernel plus cuBLAS, on one GPU.

Run from the repository root: python scripts/gpu/norm_matmul_probe.py OUT_JSON
1. Kernels alone, over 28 weight copies (more than L2 holds) in one CUDA graph: residual add + RMSNorm, then the
   projection (chapter 10's `rms_norm`, then `F.linear`) against one launch that does both, in two variants: two
   passes over K tiles (sum of squares first, then the normalized rows rounded as torch rounds them into a
   tensor-core dot) and K whole (the weight tile requested first, so its DRAM latency overlaps the norm, up to 16
   rows). Rows 1, 8, 16, 32; for `qkv` (1,024 -> 4,096) and `gate_up` (1,024 -> 6,144); the best of a small tile
   grid. (A one-pass variant, gain times rows into the dot and 1/rms applied at the end, lost to both in the first
   run: 9.1-10.7 µs for qkv against 7.7-7.8 two-pass; `one_pass=True` keeps it.)
2. LLM decode TPOT at batch 1, 8 and 32, engines in turn, twice: the engine as is, and each decoder layer using the
   fused launch (two-pass, then K whole) for steps of at most LIMIT rows. Greedy tokens compared.
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
                          random_qwen3_0_6b, tokens_equal_to, write_result)

REAL_SWAP = fused.fuse_model
SHAPES = {"qkv": (4096, 1024), "gate_up": (6144, 1024)}
ROWS = (1, 8, 16, 32)
TILES = [(bn, bk, st) for bn in (16, 32, 64) for bk in (128, 256, 512) for st in (2, 3)]
WHOLE_TILES = [(bn, warps) for bn in (16, 32) for warps in (4, 8)]
VARIANTS = {"two_pass": (False, TILES), "whole": ("whole", WHOLE_TILES)}  # one_pass lost in the first run
EPS = 1e-6


@triton.jit
def norm_matmul_kernel(x_ptr, res_ptr, g_ptr, w_ptr, out_ptr, res_out_ptr, M, N, eps, K: tl.constexpr,
                       HAS_RES: tl.constexpr, ONE_PASS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    """Program i: rows [0, M) of RMSNorm(x + res) times columns [i * BLOCK_N, ...) of W [N, K]ᵀ."""
    pid = tl.program_id(0)
    rm = tl.arange(0, BLOCK_M)[:, None]
    mmask = rm < M
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = rn < N
    res_rows = tl.where(pid == 0, M, 0)  # program 0 alone writes x + res back
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    ss = tl.zeros((BLOCK_M, 1), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)[None, :]
        xmask = mmask & (rk < K)
        x = tl.load(x_ptr + rm * K + rk, mask=xmask, other=0.0)
        if HAS_RES:
            x = (x.to(tl.float32) + tl.load(res_ptr + rm * K + rk, mask=xmask, other=0.0).to(tl.float32)).to(x.dtype)
            tl.store(res_out_ptr + rm * K + rk, x, mask=(rm < res_rows) & (rk < K))
        xf = x.to(tl.float32)
        ss += tl.sum(xf * xf, axis=1, keep_dims=True)
        if ONE_PASS:
            g = tl.load(g_ptr + rk).to(tl.float32)
            w = tl.load(w_ptr + rn[:, None] * K + rk, mask=nmask[:, None] & (rk < K), other=0.0)
            acc += tl.dot((xf * g).to(w.dtype), tl.trans(w))
    rstd = tl.rsqrt(ss / K + eps)
    if ONE_PASS:
        acc = acc * rstd
    else:
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)[None, :]
            xmask = mmask & (rk < K)
            x = tl.load(x_ptr + rm * K + rk, mask=xmask, other=0.0)
            if HAS_RES:
                x = (x.to(tl.float32) + tl.load(res_ptr + rm * K + rk, mask=xmask, other=0.0).to(tl.float32)).to(x.dtype)
            normed = (x.to(tl.float32) * rstd).to(x.dtype).to(tl.float32)  # torch rounds before the gain
            g = tl.load(g_ptr + rk).to(tl.float32)
            w = tl.load(w_ptr + rn[:, None] * K + rk, mask=nmask[:, None] & (rk < K), other=0.0)
            acc += tl.dot((normed * g).to(w.dtype), tl.trans(w))
    tl.store(out_ptr + rm * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=mmask & nmask[None, :])


@triton.jit
def norm_matmul_whole_kernel(x_ptr, res_ptr, g_ptr, w_ptr, out_ptr, res_out_ptr, M, N, eps, K: tl.constexpr,
                             HAS_RES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The same, with K whole: the weight tile is requested first, so its DRAM latency overlaps the norm."""
    pid = tl.program_id(0)
    rm = tl.arange(0, BLOCK_M)[:, None]
    rk = tl.arange(0, K)[None, :]
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + rn[:, None] * K + rk, mask=(rn[:, None] < N) & (rk < K), other=0.0)
    xmask = (rm < M) & (rk < K)
    x = tl.load(x_ptr + rm * K + rk, mask=xmask, other=0.0)
    if HAS_RES:
        x = (x.to(tl.float32) + tl.load(res_ptr + rm * K + rk, mask=xmask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(res_out_ptr + rm * K + rk, x, mask=(rm < tl.where(pid == 0, M, 0)) & (rk < K))
    xf = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(xf * xf, axis=1, keep_dims=True) / K + eps)
    normed = (xf * rstd).to(x.dtype).to(tl.float32) * tl.load(g_ptr + rk).to(tl.float32)
    acc = tl.dot(normed.to(w.dtype), tl.trans(w))
    tl.store(out_ptr + rm * N + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=(rm < M) & (rn[None, :] < N))


def norm_matmul(x, gain, weight, residual=None, one_pass=False, tile=(16, 256, 3), eps=EPS):
    """(RMSNorm(x + residual) @ weightᵀ, x + residual or None) in one launch."""
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    res_out = torch.empty_like(x) if residual is not None else None
    if one_pass == "whole":
        block_n, warps = tile
        norm_matmul_whole_kernel[(triton.cdiv(n, block_n),)](
            x, x if residual is None else residual, gain, weight, out, x if res_out is None else res_out, m, n, eps,
            K=k, HAS_RES=residual is not None, BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=block_n,
            num_warps=warps, num_stages=1)
        return out, res_out
    block_n, block_k, stages = tile
    norm_matmul_kernel[(triton.cdiv(n, block_n),)](
        x, x if residual is None else residual, gain, weight, out, x if res_out is None else res_out, m, n, eps,
        K=k, HAS_RES=residual is not None, ONE_PASS=one_pass, BLOCK_M=max(16, triton.next_power_of_2(m)),
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4, num_stages=stages)
    return out, res_out


def kernel_rows() -> list:
    """Section 1: per shape and row count, µs per call of norm + cuBLAS and of each fused variant's best tile."""
    rows = []
    for shape, (n, k) in SHAPES.items():
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.03 for _ in range(28)]
        gain = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
        for m in ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            res = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 4
            normed, new_res = fused.rms_norm(x, gain, EPS, res)
            want = F.linear(normed, weights[0])
            exact = F.linear(F.rms_norm((x.float() + res.float()), (k,), gain.float(), EPS), weights[0].float())
            row = {"shape": shape, "M": m, "N": n, "K": k,
                   "unfused_us": graph_us([lambda w=w: F.linear(fused.rms_norm(x, gain, EPS, res)[0], w)
                                           for w in weights]),
                   "unfused_err_vs_fp32": (want.float() - exact).abs().max().item()}
            for variant, (one_pass, tiles) in VARIANTS.items():
                best = None
                for tile in tiles if one_pass != "whole" or m <= 16 else ():
                    try:
                        got, got_res = norm_matmul(x, gain, weights[0], res, one_pass, tile)
                    except triton.runtime.errors.OutOfResources:
                        continue
                    us = graph_us([lambda w=w: norm_matmul(x, gain, w, res, one_pass, tile) for w in weights], reps=5)
                    if best is None or us < best[0]:
                        best = (us, tile, (got.float() - exact).abs().max().item(), torch.equal(got_res, new_res))
                row[variant] = {"us": best[0], "tile": best[1], "err_vs_fp32": best[2], "residual_equal": best[3]} \
                    if best else {"us": float("nan"), "tile": None}
            rows.append(row)
            print(f"{shape:8s} M={m:3d}: norm+cuBLAS {row['unfused_us']:6.2f} µs (err {row['unfused_err_vs_fp32']:.3f})"
                  + "".join(f"  {v} {row[v]['us']:6.2f} {row[v]['tile']} (err {row[v].get('err_vs_fp32', 0):.3f},"
                            f" residual equal {row[v].get('residual_equal')})" for v in VARIANTS), flush=True)
    return rows


def layer_swap(one_pass: bool, limit: int, tiles: dict):
    """fuse_model, then every decoder layer folding its two norms into `qkv` and `gate_up` at <= `limit` rows."""

    class NormMatmulLayer(Qwen3DecoderLayer):
        def forward(self, positions, hidden, residual, batch=None):
            attn, mlp = self.self_attn, self.mlp
            if not hidden.is_cuda or hidden.shape[0] > limit or attn.qkv_proj.bias is not None:
                return super().forward(positions, hidden, residual, batch)
            m = hidden.shape[0]
            norm = self.input_layernorm
            qkv, new_res = norm_matmul(hidden, norm.weight, attn.qkv_proj.weight, residual, one_pass,
                                       tiles[("qkv", m)], norm.eps)
            residual = hidden if residual is None else new_res
            sizes = [attn.qkv_proj.q_size, attn.qkv_proj.kv_size, attn.qkv_proj.kv_size]
            q, k, v = (t.unflatten(-1, (-1, attn.head_dim)) for t in qkv.split(sizes, -1))
            hidden = attn.o_proj(attn.attend(positions, q, k, v, batch).flatten(1))
            norm = self.post_attention_layernorm
            gate_up, residual = norm_matmul(hidden, norm.weight, mlp.gate_up_proj.weight, residual, one_pass,
                                            tiles[("gate_up", m)], norm.eps)
            return mlp.down_proj(mlp.act(gate_up)), residual

    def swap(model):
        swapped = REAL_SWAP(model)
        for module in model.modules():
            if type(module) is Qwen3DecoderLayer:
                module.__class__ = NormMatmulLayer
        return swapped
    return swap


def main():
    out_path = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    torch.manual_seed(0)
    kernels = kernel_rows()
    engine_rows = {}
    for variant in VARIANTS:
        # the engine's buckets: rows 8 and 16 (batch 1 and 8 pad to 8); any other count takes the 16-row tile
        best = {(r["shape"], r["M"]): tuple(r[variant]["tile"]) for r in kernels if r[variant]["tile"]}
        engine_rows[variant] = {(s, m): best.get((s, m), best[(s, 16)]) for s in SHAPES for m in range(1, limit + 1)}
    model = random_qwen3_0_6b()
    runs = []
    for again in ("", " again"):
        runs += [(f"as is{again}", REAL_SWAP, contextlib.nullcontext(), {"norms": "separate"}),
                 (f"two-pass{again}", layer_swap(False, limit, engine_rows["two_pass"]), contextlib.nullcontext(),
                  {"norms": f"in qkv/gate_up up to {limit} rows, two passes"}),
                 (f"whole{again}", layer_swap("whole", limit, engine_rows["whole"]), contextlib.nullcontext(),
                  {"norms": f"in qkv/gate_up up to {limit} rows, K whole, weights requested first"})]
    engine, tokens = compare_engines(model, runs, [list(range(100, 164)), list(range(500, 900))])
    same = tokens_equal_to(tokens, "as is")
    write_result(out_path, {**TPOT_CONFIG, "limit_rows": limit, "tiles": [list(t) for t in TILES]},
                 kernels=kernels, engine=engine, greedy_tokens_equal_to_as_is=same)
    print("\nkernels, µs per call (best tile):  norm+cuBLAS  two-pass  whole")
    for r in kernels:
        print(f"  {r['shape']:8s} M={r['M']:3d}            {r['unfused_us']:7.2f}  {r['two_pass']['us']:8.2f}"
              f"  {r['whole']['us']:8.2f}")
    print_tpot_table(engine, "norms")
    print("greedy tokens equal to 'as is' (of 128):", same)
    print("TPOT medians, batch 1:", {n: round(statistics.median(r[1]), 3) for n, r in engine.items()})


if __name__ == "__main__":
    main()
