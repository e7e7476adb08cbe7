"""Small-M GEMV with a fused prologue (plain, SiLU-and-mul, add+RMSNorm) against cuBLAS plus a separate kernel."""
import itertools
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, ".")
from nanoserve.kernels.fused import rms_norm, silu_and_mul  # noqa: E402
from probe_timing import graph_us  # noqa: E402  (this script's folder)


@triton.jit
def small_gemm_kernel(x_ptr, r_ptr, nw_ptr, w_ptr, y_ptr, ro_ptr, M, N, K, stride_x, stride_y, eps,
                      PROLOGUE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mmask = rm < M
    nmask = rn < N
    if PROLOGUE == 2:
        ss = tl.zeros((BLOCK_M,), tl.float32)
        for k0 in range(0, K, BLOCK_K):
            rk = k0 + tl.arange(0, BLOCK_K)
            m2 = mmask[:, None] & (rk[None, :] < K)
            h = (tl.load(x_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32)
                 + tl.load(r_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32))
            h = h.to(y_ptr.dtype.element_ty).to(tl.float32)
            ss += tl.sum(h * h, axis=1)
            if pid == 0:
                tl.store(ro_ptr + rm[:, None] * stride_x + rk[None, :], h.to(y_ptr.dtype.element_ty), mask=m2)
        inv = tl.rsqrt(ss / K + eps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        m2 = mmask[:, None] & (rk[None, :] < K)
        if PROLOGUE == 0:
            xk = tl.load(x_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32)
        elif PROLOGUE == 1:
            g = tl.load(x_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32)
            u = tl.load(x_ptr + rm[:, None] * stride_x + K + rk[None, :], mask=m2, other=0.0).to(tl.float32)
            act = (g / (1.0 + tl.exp(-g))).to(y_ptr.dtype.element_ty).to(tl.float32)
            xk = (act * u).to(y_ptr.dtype.element_ty).to(tl.float32)
        else:
            h = (tl.load(x_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32)
                 + tl.load(r_ptr + rm[:, None] * stride_x + rk[None, :], mask=m2, other=0.0).to(tl.float32))
            h = h.to(y_ptr.dtype.element_ty).to(tl.float32)
            nw = tl.load(nw_ptr + rk, mask=rk < K, other=0.0).to(tl.float32)
            xk = (h * inv[:, None]).to(y_ptr.dtype.element_ty).to(tl.float32) * nw[None, :]
            xk = xk.to(y_ptr.dtype.element_ty).to(tl.float32)
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :], mask=nmask[:, None] & (rk[None, :] < K), other=0.0)
        acc += tl.sum(xk[:, None, :] * w[None, :, :].to(tl.float32), axis=2)
    tl.store(y_ptr + rm[:, None] * stride_y + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mmask[:, None] & nmask[None, :])


def small_gemm(x, w, prologue=0, residual=None, norm_w=None, eps=1e-6, block_n=8, block_k=256, warps=4):
    M = x.shape[0]
    N, K = w.shape
    y = torch.empty(M, N, device=x.device, dtype=x.dtype)
    ro = torch.empty(M, K, device=x.device, dtype=x.dtype) if prologue == 2 else y
    bm = max(1, triton.next_power_of_2(M))
    small_gemm_kernel[(triton.cdiv(N, block_n),)](
        x, residual if residual is not None else x, norm_w if norm_w is not None else x, w, y, ro, M, N, K,
        x.stride(0), y.stride(0), eps, PROLOGUE=prologue, BLOCK_M=bm, BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=warps)
    return (y, ro) if prologue == 2 else y


def main():
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    L = 28
    cases = {  # name: (prologue, N, K)
        "o": (0, 1024, 2048), "down": (0, 1024, 3072), "silu+down": (1, 1024, 3072),
        "norm+qkv": (2, 4096, 1024), "norm+gate_up": (2, 6144, 1024), "qkv": (0, 4096, 1024)}
    grid = list(itertools.product((4, 8, 16, 32), (128, 256, 512), (4, 8)))
    total = {}
    for name, (pro, N, K) in cases.items():
        ws = [torch.randn(N, K, device=dev, dtype=bf) * 0.02 for _ in range(L)]
        nws = [torch.rand(K, device=dev, dtype=bf) + 0.5 for _ in range(L)]
        for M in (1, 2, 4, 8):
            kin = 2 * K if pro == 1 else K
            xs = [torch.randn(M, kin, device=dev, dtype=bf) for _ in range(L)]
            rs = [torch.randn(M, K, device=dev, dtype=bf) for _ in range(L)]
            if pro == 0:
                base = lambda x, r, nw, w: F.linear(x, w)
                ref = F.linear(xs[0].float(), ws[0].float())
            elif pro == 1:
                base = lambda x, r, nw, w: F.linear(silu_and_mul(x), w)
                ref = F.linear(silu_and_mul(xs[0]).float(), ws[0].float())
            else:
                base = lambda x, r, nw, w: F.linear(rms_norm(x, nw, 1e-6, r)[0], w)
                ref = F.linear(rms_norm(xs[0], nws[0], 1e-6, rs[0])[0].float(), ws[0].float())
            args = list(zip(xs, rs, nws, ws))
            t_base = graph_us([lambda a=a: base(*a) for a in args])
            best = None
            for bn, bk, wp in grid:
                if triton.next_power_of_2(M) * bn * bk > 4096 * wp:
                    continue
                f = lambda x, r, nw, w: small_gemm(x, w, pro, r, nw, 1e-6, bn, bk, wp)
                try:
                    y = f(*args[0])
                    y = y[0] if isinstance(y, tuple) else y
                    err = (y.float() - ref).abs().max().item() / ref.abs().max().item()
                    if err > 0.02:
                        print("  bad", name, M, bn, bk, wp, err)
                        continue
                    t = graph_us([lambda a=a: f(*a) for a in args], reps=5)
                except Exception as e:  # a config Triton cannot build
                    print("  fail", name, M, bn, bk, wp, type(e).__name__, str(e)[:100])
                    continue
                if best is None or t < best[0]:
                    best = (t, (bn, bk, wp), err)
            total.setdefault(M, [0.0, 0.0])
            if name in ("o", "silu+down", "norm+qkv", "norm+gate_up"):
                total[M][0] += t_base * L
                total[M][1] += min(best[0], t_base) * L
            print(f"{name:13s} M={M}: unfused {t_base:6.2f} µs  fused {best[0]:6.2f} µs {best[1]} err {best[2]:.1e}",
                  flush=True)
    print("\nper step, 28 layers (o + silu+down + norm+qkv + norm+gate_up), µs: unfused vs best")
    for M, (a, b) in total.items():
        print(f"M={M}: {a:.0f} -> {b:.0f}")


if __name__ == "__main__":
    main()
