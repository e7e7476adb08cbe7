"""Where a large decode step's time goes: kernels per decode step by kind, against the two floors, and the GEMMs alone.

Run ON THE GPU MACHINE from the repository root (flash-attn importable):
    python scripts/gpu/decode_profile.py [--out DIR] [--lanes 256,64,1] [--context 592]
Part 1 (engine): for each lane count, `lanes` prompts are cached first; then two profiled generate calls over the
same prompts, 1 token and 1 + STEPS tokens: the difference of their kernel tables is STEPS decode steps at that many
lanes (contexts CONTEXT .. CONTEXT + STEPS). Kernels are grouped by kind and set against the KV-read floor.
Part 2 (GEMMs alone): each projection at M = lanes, cuBLAS (F.linear on an [N, K] weight) against a matmul on the
transposed [K, N] copy, in a CUDA graph over 28 weight copies, against its floor.
Prints a short table last and writes decode_profile_<tag>.json with provenance.
"""
import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from probe_timing import decode_ms, graph_us  # noqa: E402  (this script's folder)
from profile_steps import kernel_table, profiled  # noqa: E402

STEPS = 64
KINDS = [("attention", r"flash|fmha|attn"), ("gemm", r"nvjet|gemm|cutlass|sm90_xmma|splitKreduce"),
         ("norm", r"rms_norm"), ("rotary+store", r"rotary_kernel|store_kernel"), ("silu", r"silu"),
         ("sampler", r"sample|ArgMax|SoftMax|DivFunctor|clamp|uniform_and_transform|direct_copy|topk|sort")]
SHAPES = {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072),
          "lm_head": (151936, 1024)}
CALLS_PER_STEP = {"qkv": 28, "o": 28, "gate_up": 28, "down": 28, "lm_head": 1}


def kind_of(name: str) -> str:
    return next((k for k, pattern in KINDS if re.search(pattern, name, re.I)), "other")


def kernel_totals(llm, prompts, params) -> dict:
    """{kernel name: (calls, total ms)} of one profiled generate call."""
    return {name: (calls, ms) for name, calls, ms in kernel_table(profiled(llm, prompts, params)[0], top=None)[0]}


def decode_phase(llm, lanes: int, context: int, bandwidth: float, seed: int) -> dict:
    """Kernels of STEPS decode steps at `lanes` lanes (contexts from `context`), by kind and by name, per step."""
    from nanoserve import SamplingParams

    g = torch.Generator().manual_seed(seed)
    prompts = [{"prompt_token_ids": torch.randint(0, 10000, (context,), generator=g).tolist()} for _ in range(lanes)]
    one = SamplingParams(temperature=0.6, max_tokens=1, ignore_eos=True)
    many = SamplingParams(temperature=0.6, max_tokens=1 + STEPS, ignore_eos=True)
    walls = decode_ms(llm, prompts, 1 + STEPS, runs=3, temperature=0.6)  # the warm-up caches the prompts
    base, full = kernel_totals(llm, prompts, one), kernel_totals(llm, prompts, many)
    per_kernel = {}
    for name, (calls, ms) in full.items():
        c0, m0 = base.get(name, (0, 0.0))
        if ms - m0 > 1e-4:
            per_kernel[name] = (max(calls - c0, 0) / STEPS, (ms - m0) / STEPS)
    by_kind = {}
    for name, (_, ms) in per_kernel.items():
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + ms
    mean_context = context + STEPS / 2
    kv_bytes = lanes * mean_context * 8 * 128 * 2 * 2 * 28  # k and v, 8 heads of 128, bf16, 28 layers
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:16]
    return {"lanes": lanes, "context": [context, context + STEPS], "wall_ms_per_step": walls,
            "gpu_ms_per_step": sum(by_kind.values()), "by_kind_ms": by_kind,
            "kv_bytes_per_step": kv_bytes, "kv_floor_ms": kv_bytes / bandwidth * 1000,
            "attention_tb_s": kv_bytes / (by_kind.get("attention", float("nan")) / 1000) / 1e12,
            "top_kernels": [{"name": n, "calls_per_step": c, "ms_per_step": m} for n, (c, m) in top]}


def gemm_rows(ms: list, bandwidth: float, flops: float) -> list:
    """Each projection at each M: cuBLAS on [N, K] (F.linear) and on [K, N] (x @ w_t), µs per call, and the floor."""
    rows = []
    for name, (n, k) in SHAPES.items():
        copies = 2 if name == "lm_head" else 28
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
        transposed = [w.t().contiguous() for w in weights]
        for m in ms:
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
            assert torch.allclose(xs[0] @ transposed[0], F.linear(xs[0], weights[0]), atol=0.05, rtol=0.02)
            floor = max((n * k + m * k + m * n) * 2 / bandwidth, 2 * m * n * k / flops) * 1e6
            rows.append({"shape": name, "M": m, "N": n, "K": k, "floor_us": floor,
                         "linear_us": graph_us([lambda x=x, w=w: F.linear(x, w) for x, w in zip(xs, weights)]),
                         "matmul_kn_us": graph_us([lambda x=x, w=w: x @ w for x, w in zip(xs, transposed)])})
        del weights, transposed
        torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="h200")
    parser.add_argument("--lanes", default="256,128,64,1")
    parser.add_argument("--context", type=int, default=592, help="prompt length (the random workload's mean: 558)")
    args = parser.parse_args()
    from nanobench.floor import measure_gpu_rates
    from nanobench.provenance import collect_provenance, command_line, utc_now
    from nanoserve import LLM
    from nanoserve.model.tiny import QWEN3_0_6B_CONFIG, make_checkpoint_from_config

    hw = measure_gpu_rates()
    bandwidth, flops = hw["memory_bandwidth_bytes_s"], hw["bf16_dense_flops_s"]
    ckpt = make_checkpoint_from_config(QWEN3_0_6B_CONFIG, Path(tempfile.mkdtemp()) / "q", with_tokenizer=False)
    llm = LLM(str(ckpt), skip_tokenizer_init=True, max_model_len=4096, gpu_memory_utilization=0.8)
    lanes = [int(x) for x in args.lanes.split(",")]
    phases = [decode_phase(llm, n, args.context, bandwidth, seed=i) for i, n in enumerate(lanes)]
    backend = llm.config.attention_backend_class.name
    del llm
    torch.cuda.empty_cache()
    gemms = gemm_rows(sorted(set(lanes)), bandwidth, flops)
    result = {"date": utc_now(), "command": command_line(sys.argv), "provenance": collect_provenance(),
              "hardware": hw, "config": {"model": "random weights, exact Qwen3-0.6B shapes", "steps": STEPS,
                                         "context": args.context, "temperature": 0.6, "backend": backend},
              "decode": phases, "gemms": gemms}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"decode_profile_{args.tag}.json").write_text(json.dumps(result, indent=1))
    for p in phases:
        print(f"\n== {p['lanes']} lanes, contexts {p['context']}: wall {statistics.median(p['wall_ms_per_step']):.3f} "
              f"ms/step, kernels {p['gpu_ms_per_step']:.3f}; KV floor {p['kv_floor_ms']:.3f} ms, attention at "
              f"{p['attention_tb_s']:.2f} TB/s")
        print("   " + "  ".join(f"{k} {v:.3f}" for k, v in sorted(p["by_kind_ms"].items(), key=lambda kv: -kv[1])))
        for t in p["top_kernels"][:10]:
            print(f"   {t['ms_per_step']:7.3f} ms {t['calls_per_step']:6.1f}/step  {t['name'][:80]}")
    print("\nGEMMs per decode step (28 layers + lm_head), µs: F.linear [N,K] | x @ [K,N] | floor")
    for m in sorted(set(lanes)):
        sel = [r for r in gemms if r["M"] == m]
        cols = [sum(r[c] * CALLS_PER_STEP[r["shape"]] for r in sel) for c in ("linear_us", "matmul_kn_us", "floor_us")]
        detail = " ".join(f"{r['shape']} {r['linear_us']:.1f}/{r['matmul_kn_us']:.1f}/{r['floor_us']:.1f}" for r in sel)
        print(f"M={m:3d}: {cols[0]:7.1f} | {cols[1]:7.1f} | {cols[2]:7.1f}   {detail}")
    print(f"backend {backend}; device {hw['memory_bandwidth_bytes_s'] / 1e12:.2f} TB/s, "
          f"{hw['bf16_dense_flops_s'] / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
