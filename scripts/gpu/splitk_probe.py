"""The two 1,024-wide projections (`o`, `down`) split over K at small batch, their partial sums added by the RMSNorm
that reads them: more programs streaming the weights, and no reduce kernel, on one GPU.

Run from the repository root: python scripts/gpu/splitk_probe.py OUT_JSON [LIMIT]
1. Kernels alone, over 28 weight copies (more than L2 holds) in one CUDA graph: the projection (cuBLAS) then chapter
   10's residual add + RMSNorm, against a Triton kernel that writes S partial sums (fp32) and a norm kernel that adds
   them, rounds as the GEMM would, adds the residual and normalizes. Rows 1, 8, 16; the best of a small tile grid.
   (The recorded run, results/splitk_h100.json, used the probe's own copies of the two kernels; chapter 10 section 8
   exported them unchanged, and the probe now launches the exported ones with its own tiles.)
2. LLM decode TPOT at batch 1, 8 and 32, engines in turn, twice: as is, and each decoder layer using the split
   projections for steps of at most LIMIT rows (default 16; the last layer's `down` stays cuBLAS, since the final
   norm is not the probe's). Greedy tokens compared.
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
import triton

import nanoserve.kernels.fused as fused
from nanoserve.model.qwen3 import Qwen3DecoderLayer
from probe_timing import (TPOT_CONFIG, compare_engines, graph_us, print_tpot_table,  # this script's folder
                          random_qwen3_0_6b, tokens_equal_to, write_result)

REAL_SWAP = fused.fuse_model
SHAPES = {"o": (1024, 2048), "down": (1024, 3072)}
ROWS = (1, 8, 16)
TILES = [(s, bn, bk) for s in (2, 4, 8) for bn in (16, 32, 64) for bk in (128, 256)]
EPS = 1e-6


def splitk(x, weight, tile):
    """S partial sums [S, M, N] (fp32) of x @ weightᵀ, K split S ways."""
    m, k = x.shape
    n = weight.shape[0]
    s, block_n, block_k = tile
    ws = torch.empty(s, m, n, dtype=torch.float32, device=x.device)
    fused._split_matmul_kernel()[(triton.cdiv(n, block_n), s)](x, weight, ws, m, n, K=k, K_PER=k // s,
                                                               BLOCK_M=max(16, triton.next_power_of_2(m)),
                                                               BLOCK_N=block_n, BLOCK_K=block_k)
    return ws


def partial_norm(ws, residual, gain, eps=EPS):
    """(RMSNorm(sum(ws) + residual), sum(ws) + residual) in one launch, both in the residual's dtype."""
    s, m, n = ws.shape
    out, res_out = torch.empty_like(residual), torch.empty_like(residual)
    fused._partial_norm_kernel()[(m,)](ws, residual, gain, out, res_out, m, eps, N=n, S=s,
                                       BLOCK=triton.next_power_of_2(n))
    return out, res_out


def fits(tile, k) -> bool:
    s, _, block_k = tile
    return k % s == 0 and (k // s) % block_k == 0


def kernel_rows() -> list:
    """Section 1: per shape and row count, µs per pair of cuBLAS + norm and of the split pair's best tile."""
    rows = []
    for shape, (n, k) in SHAPES.items():
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.03 for _ in range(28)]
        gain = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        for m in ROWS:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            res = torch.randn(m, n, device="cuda", dtype=torch.bfloat16) * 4
            want, want_res = fused.rms_norm(F.linear(x, weights[0]), gain, EPS, res)
            exact = F.rms_norm(x.float() @ weights[0].float().T + res.float(), (n,), gain.float(), EPS)
            row = {"shape": shape, "M": m, "N": n, "K": k,
                   "cublas_norm_us": graph_us([lambda w=w: fused.rms_norm(F.linear(x, w), gain, EPS, res)
                                               for w in weights]),
                   "cublas_norm_err_vs_fp32": (want.float() - exact).abs().max().item()}
            best = None
            for tile in (t for t in TILES if fits(t, k)):
                got, got_res = partial_norm(splitk(x, weights[0], tile), res, gain)
                us = graph_us([lambda w=w: partial_norm(splitk(x, w, tile), res, gain) for w in weights], reps=5)
                if best is None or us < best[0]:
                    best = (us, tile, (got.float() - exact).abs().max().item(),
                            (got_res.float() - want_res.float()).abs().max().item())
            row["split"] = {"us": best[0], "tile": list(best[1]), "err_vs_fp32": best[2],
                            "residual_max_diff_vs_cublas": best[3]}
            rows.append(row)
            print(f"{shape:5s} M={m:3d}: cuBLAS + norm {row['cublas_norm_us']:6.2f} µs (err "
                  f"{row['cublas_norm_err_vs_fp32']:.3f})  split {best[0]:6.2f} µs {best[1]} (err {best[2]:.3f}, "
                  f"residual vs cuBLAS's {best[3]:.3g})", flush=True)
    return rows


def layer_swap(limit: int, tiles: dict):
    """fuse_model, then every decoder layer splitting `o` and `down` over K at <= `limit` rows, the next norm adding
    the partial sums (the last layer's `down` stays cuBLAS: the model's final norm reads it)."""

    class SplitLayer(Qwen3DecoderLayer):
        def forward(self, positions, hidden, residual, batch=None):
            attn, mlp = self.self_attn, self.mlp
            m = hidden.shape[-2]
            if not hidden.is_cuda or m > limit:
                return super().forward(positions, hidden, residual, batch)
            if residual is None:
                residual, hidden = hidden, self.input_layernorm(hidden)
            elif hidden.dim() == 3:  # the previous layer's partial sums
                hidden, residual = partial_norm(hidden, residual, self.input_layernorm.weight, self.input_layernorm.eps)
            else:
                hidden, residual = self.input_layernorm(hidden, residual)
            sizes = [attn.qkv_proj.q_size, attn.qkv_proj.kv_size, attn.qkv_proj.kv_size]
            q, k, v = (t.unflatten(-1, (-1, attn.head_dim)) for t in attn.qkv_proj(hidden).split(sizes, -1))
            partials = splitk(attn.attend(positions, q, k, v, batch).flatten(1), attn.o_proj.weight, tiles[("o", m)])
            norm = self.post_attention_layernorm
            hidden, residual = partial_norm(partials, residual, norm.weight, norm.eps)
            act = mlp.act(mlp.gate_up_proj(hidden))
            if self.last:
                return mlp.down_proj(act), residual
            return splitk(act, mlp.down_proj.weight, tiles[("down", m)]), residual

    def swap(model):
        swapped = REAL_SWAP(model)
        layers = [mod for mod in model.modules() if type(mod) is Qwen3DecoderLayer]
        for i, mod in enumerate(layers):
            mod.__class__, mod.last = SplitLayer, i == len(layers) - 1
        return swapped
    return swap


def main():
    out_path = sys.argv[1]
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    torch.manual_seed(0)
    kernels = kernel_rows()
    best = {(r["shape"], r["M"]): tuple(r["split"]["tile"]) for r in kernels}
    tiles = {(s, m): best.get((s, m), best[(s, 16)] if m > 8 else best[(s, 8)]) for s in SHAPES
             for m in range(1, limit + 1)}
    model = random_qwen3_0_6b()
    runs = []
    for again in ("", " again"):
        runs += [(f"as is{again}", REAL_SWAP, contextlib.nullcontext(), {"o_down": "cuBLAS"}),
                 (f"split-K{again}", layer_swap(limit, tiles), contextlib.nullcontext(),
                  {"o_down": f"split over K up to {limit} rows, partial sums added by the next norm"})]
    engine, tokens = compare_engines(model, runs, [list(range(100, 164)), list(range(500, 900))])
    same = tokens_equal_to(tokens, "as is")
    write_result(out_path, {**TPOT_CONFIG, "limit_rows": limit, "tiles": [list(t) for t in TILES]},
                 kernels=kernels, engine=engine, greedy_tokens_equal_to_as_is=same)
    print("\nkernels, µs per pair (best tile):  cuBLAS + norm   split + norm")
    for r in kernels:
        print(f"  {r['shape']:5s} M={r['M']:3d}                 {r['cublas_norm_us']:7.2f}  {r['split']['us']:12.2f}")
    print_tpot_table(engine, "o_down")
    print("greedy tokens equal to 'as is' (of 128):", same)


if __name__ == "__main__":
    main()
