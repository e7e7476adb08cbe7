"""Qwen3-0.6B's projections at decode's row counts (64, 128, 256): cuBLAS against a Triton tile grid, and the floor.

Run from the repository root: python scripts/gpu/decode_gemm_probe.py OUT_JSON
The 2026-12-05 profile put a 256-lane step's GEMMs at about twice the time their weights take to stream. A guess at
why: at 256 rows a 1,024-wide output is only 16 tiles of 128 x 128, too few programs to keep every SM streaming.
This probe measures, per projection and row count, µs per call over 28 weight copies (more than L2 holds) in one
CUDA graph: cuBLAS (`F.linear`, as the engine calls it), the same with cuBLASLt preferred, the operands swapped
(W xᵀ, so the library tiles N as its rows), a plain Triton GEMM at several tile shapes (smaller tiles: more
programs; a weight tile re-read by another row block comes from L2), and the floor (weight bytes at the card's
measured copy rate). It prints what one decode step's projections (28 layers plus the head) take each way, with
the best tile per shape.
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from probe_timing import graph_us, write_result  # this script's folder

SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072),
          "lm_head": (151936, 1024)}
ROWS = (64, 128, 256)
TILES = [(64, 64, 128, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 32, 128, 4, 4),  # (BLOCK_M, BLOCK_N,
         (128, 128, 64, 8, 3), (32, 64, 128, 4, 4), (64, 64, 64, 4, 3), (128, 32, 128, 4, 3)]  # BLOCK_K, warps, stages)
COPIES = 28


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, out_ptr, m, n, k,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[m, n] = x[m, k] @ w[n, k]ᵀ, one BLOCK_M x BLOCK_N tile per program, fp32 accumulation."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    keys = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        a = tl.load(x_ptr + rows[:, None].to(tl.int64) * k + (k0 + keys)[None, :], mask=rows[:, None] < m, other=0.0)
        b = tl.load(w_ptr + cols[None, :].to(tl.int64) * k + (k0 + keys)[:, None], mask=cols[None, :] < n, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * n + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < m) & (cols[None, :] < n))


def triton_linear(x, weight, tile):
    """x @ weightᵀ with one tile shape (K must be a multiple of its BLOCK_K)."""
    m, k = x.shape
    n = weight.shape[0]
    bm, bn, bk, warps, stages = tile
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    _gemm_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](x, weight, out, m, n, k, BLOCK_M=bm, BLOCK_N=bn,
                                                            BLOCK_K=bk, num_warps=warps, num_stages=stages)
    return out


@contextlib.contextmanager
def blas_library(name: str):
    """torch's preferred BLAS library set to `name` inside the block (read when a matmul is launched or captured)."""
    old = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(old)


def copy_rate_tb_s() -> float:
    """The card's device-to-device copy rate, TB/s (a 1 GiB copy: the bytes read and written, both counted)."""
    src = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = graph_us([lambda: dst.copy_(src)], reps=10)
    return 2 * src.numel() * src.element_size() / us / 1e6


def shape_rows(name: str, n: int, k: int, rate: float) -> list:
    """Per row count: cuBLAS µs, each fitting tile's µs and max error against cuBLAS, the floor µs, the best tile."""
    copies = 1 if name == "lm_head" else COPIES
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    out = []
    for rows in ROWS:
        x = torch.randn(rows, k, device="cuda", dtype=torch.bfloat16)
        cublas = graph_us([lambda w=w: F.linear(x, w) for w in weights])
        with blas_library("cublaslt"):
            cublaslt = graph_us([lambda w=w: F.linear(x, w) for w in weights])
        swapped = graph_us([lambda w=w: torch.mm(w, x.t()) for w in weights])  # Wxᵀ: the rows become N
        ref = F.linear(x, weights[0]).float()
        tiles = {}
        for tile in TILES:
            if k % tile[2]:
                continue
            err = (triton_linear(x, weights[0], tile).float() - ref).abs().max().item()
            tiles["x".join(map(str, tile))] = {"us": graph_us([lambda w=w: triton_linear(x, w, tile) for w in weights]),
                                               "max_abs_err": err}
        floor = n * k * 2 / rate / 1e6
        best = min(tiles, key=lambda t: tiles[t]["us"])
        out.append({"rows": rows, "cublas_us": cublas, "cublaslt_us": cublaslt, "swapped_us": swapped,
                    "floor_us": floor, "tiles": tiles, "best_tile": best})
        print(f"{name:8s} rows {rows:3d}: cuBLAS {cublas:7.2f}, cuBLASLt {cublaslt:7.2f}, Wxᵀ {swapped:7.2f}, "
              f"best tile {best} {tiles[best]['us']:7.2f} (err {tiles[best]['max_abs_err']:.3g}), "
              f"floor {floor:6.2f} µs", flush=True)
        del x
    return out


def step_totals(results: dict) -> dict:
    """Per row count, µs of one step's projections (28 layers of four, the head once), each way and at the floor."""
    def us(row, key):
        return row["tiles"][row["best_tile"]]["us"] if key == "best" else row[key]

    keys = ("cublas_us", "cublaslt_us", "swapped_us", "best", "floor_us")
    return {rows: {key: sum((1 if name == "lm_head" else 28) * us(r[i], key) for name, r in results.items())
                   for key in keys}
            for i, rows in enumerate(ROWS)}


def main(path: str) -> None:
    rate = copy_rate_tb_s()
    print(f"{torch.cuda.get_device_name()}: copy {rate:.2f} TB/s", flush=True)
    results = {name: shape_rows(name, n, k, rate) for name, (n, k) in SHAPES.items()}
    totals = step_totals(results)
    print("\none step's projections, µs\nrows    cuBLAS  cuBLASLt      Wxᵀ  best tiles   floor")
    for rows, t in totals.items():
        print(f"{rows:4d} {t['cublas_us']:9.1f} {t['cublaslt_us']:9.1f} {t['swapped_us']:8.1f} {t['best']:11.1f} "
              f"{t['floor_us']:7.1f}")
    write_result(path, {"shapes": SHAPES, "rows": ROWS, "tiles": TILES, "copies": COPIES},
                 copy_rate_tb_s=rate, projections=results, step_totals=totals)


if __name__ == "__main__":
    main(sys.argv[1])
