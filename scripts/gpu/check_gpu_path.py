"""One pass over nanoserve's GPU path on a CUDA machine: correctness checks and timings, JSON into $OUT.

Run from the repository root with flash-attn importable and PYTHONPATH=$PWD:
    python scripts/gpu/check_gpu_path.py [--config .gpu_e/config.json] [--out $OUT]
Writes attention_h200.json (store kernel, flash vs torch backend per scenario, dense vs paged prefill)
and cuda_graphs_h200.json (decode step time vs batch size, eager vs CUDA graph, on a random-weight model
with the given config's exact shapes), then prints a short table.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from course.paged_batch import SCENARIOS, build_attention_batch, paged_case, scenario  # noqa: E402
from nanoserve.attention.batch import allocate_kv_cache  # noqa: E402
from nanoserve.attention.flash import FlashAttentionBackend, store_kv_triton  # noqa: E402
from nanoserve.attention.torch_ref import TorchAttentionBackend, store_kv  # noqa: E402
from nanoserve.engine.cuda_graph import DecodeGraphs, decode_buckets  # noqa: E402
from nanoserve.engine.model_runner import build_step_inputs  # noqa: E402


def cuda_ms(fn, iters=30):
    """Mean GPU milliseconds per call (CUDA events) after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iters


def wall_ms(fn, iters=30):
    """Mean wall-clock milliseconds per call including host overhead, synchronised at the end."""
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1000 / iters


def provenance(args):
    import flash_attn
    import transformers
    import triton

    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "flash_attn": flash_attn.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "command": "python scripts/gpu/check_gpu_path.py " + " ".join(sys.argv[1:])}


def check_store():
    """Triton store == torch store bit for bit (strided input, -1 slots); time both."""
    dev, n = "cuda", 8192
    _, ca = allocate_kv_cache(1, 64, 256, 8, 128, dtype=torch.bfloat16, device=dev)
    _, cb = allocate_kv_cache(1, 64, 256, 8, 128, dtype=torch.bfloat16, device=dev)
    qkv = torch.randn(n, 4096, device=dev, dtype=torch.bfloat16)
    k, v = qkv[:, 2048:3072].view(n, 8, 128), qkv[:, 3072:].view(n, 8, 128)
    slots = torch.randperm(64 * 256, device=dev)[:n]
    slots[::5] = -1
    store_kv_triton(k, v, *ca[0], slots)
    store_kv(k, v, *cb[0], slots)
    exact = torch.equal(ca[0][0], cb[0][0]) and torch.equal(ca[0][1], cb[0][1])
    untouched = bool((ca[0][0].view(-1, 8, 128)[torch.tensor(sorted(set(range(64 * 256)) - set(slots.tolist())),
                                                             device=dev)] == 0).all())
    return {"tokens": n, "exact": exact, "skipped_slots_untouched": untouched,
            "triton_ms": cuda_ms(lambda: store_kv_triton(k, v, *ca[0], slots)),
            "torch_ms": cuda_ms(lambda: store_kv(k, v, *cb[0], slots))}


def check_attention():
    """Flash vs torch backend per scenario: max abs error and GPU time of one layer."""
    rows = {}
    for name in SCENARIOS:
        specs, shared = scenario(name, 256)
        res = {}
        for backend in (TorchAttentionBackend(), FlashAttentionBackend()):
            q, k, v, batch = paged_case(specs, backend, shared_prefix_blocks=shared)
            out = backend.forward(q, k, v, 0, batch)
            res[backend.name] = (out.float(), cuda_ms(lambda: backend.forward(q, k, v, 0, batch), iters=10))
        err = (res["flash"][0] - res["torch"][0]).abs().max().item()
        rows[name] = {"seqs": len(specs), "new_tokens": sum(n for _, n in specs), "max_abs_err": err,
                      "torch_ms": res["torch"][1], "flash_ms": res["flash"][1]}
    return rows


def dense_vs_paged_prefill():
    """flash_attn_varlen_func on fresh k/v vs through the block table, for a pure prefill batch."""
    from flash_attn import flash_attn_varlen_func

    specs = [(0, 2048), (0, 1024), (0, 700), (0, 300)]
    q, k, v, batch = paged_case(specs, FlashAttentionBackend())
    FlashAttentionBackend().forward(q, k, v, 0, batch)
    kc, vc = batch.kv_caches[0]
    args = (batch.cu_seqlens_q, batch.cu_seqlens_k, batch.max_seqlen_q, batch.max_seqlen_k)
    dense = flash_attn_varlen_func(q, k, v, *args, causal=True)
    paged = flash_attn_varlen_func(q, kc, vc, *args, causal=True, block_table=batch.block_tables)
    return {"tokens": q.shape[0], "equal": torch.equal(dense, paged),
            "dense_ms": cuda_ms(lambda: flash_attn_varlen_func(q, k, v, *args, causal=True)),
            "paged_ms": cuda_ms(lambda: flash_attn_varlen_func(q, kc, vc, *args, causal=True,
                                                               block_table=batch.block_tables))}


def build_model(config_path):
    """Random-weight bf16 model with the config's exact shapes, on the GPU."""
    from transformers import Qwen3Config

    from nanoserve.model.qwen3 import Qwen3ForCausalLM

    config = Qwen3Config(**json.loads(Path(config_path).read_text()))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if name.endswith("norm.weight") else 0.02 * torch.randn_like(p))
    return model.eval(), config


def check_graphs(config_path, batch_sizes, context_len=512, max_model_len=4096):
    """Decode step time vs batch size, eager vs graph replay, and replay == eager on the same inputs."""
    model, config = build_model(config_path)
    bs_block, backend = 256, FlashAttentionBackend()
    blocks_per_seq = -(-(context_len + 1) // bs_block)
    n_max = max(batch_sizes)
    _, caches = allocate_kv_cache(config.num_hidden_layers, n_max * blocks_per_seq + 1, bs_block,
                                  config.num_key_value_heads, config.head_dim, dtype=torch.bfloat16, device="cuda")
    t0 = time.perf_counter()
    graphs = DecodeGraphs(model, caches, backend, decode_buckets(n_max), max_model_len, bs_block)
    capture_s = time.perf_counter() - t0
    mem_pool_mib = torch.cuda.memory_reserved() / 2**20

    def inputs(n):
        tables = [list(range(1 + i * blocks_per_seq, 1 + (i + 1) * blocks_per_seq)) for i in range(n)]
        ids = [(7 * i + 3) % config.vocab_size for i in range(n)]
        pos = [context_len - 1] * n
        slots = [t[(context_len - 1) // bs_block] * bs_block + (context_len - 1) % bs_block for t in tables]
        return ids, pos, slots, [context_len] * n, tables

    @torch.no_grad()
    def eager(n):
        ids, pos, slots, ctx, tables = inputs(n)
        batch = build_attention_batch(tables, ctx, [1] * n, bs_block, caches, backend, device="cuda")
        hidden = model(torch.tensor(ids, device="cuda"), torch.tensor(pos, device="cuda"), batch)
        return model.compute_logits(hidden)

    @torch.no_grad()
    def replay(n):
        ids, pos, slots, ctx, tables = inputs(n)
        step = build_step_inputs([[i] for i in ids], pos, tables, [True] * n, bs_block)
        return model.compute_logits(graphs.replay(step))

    rows, checks = [], {}
    for n in batch_sizes:
        rows.append({"batch_size": n, "eager_ms": wall_ms(lambda: eager(n), iters=20),
                     "graph_ms": wall_ms(lambda: replay(n), iters=20)})
    for n in sorted({1, 5, 8, 37, n_max}):
        if n > n_max:
            continue
        a, b = eager(n).float(), replay(n).float()
        checks[n] = {"max_abs_err": (a - b).abs().max().item(), "bitwise_equal": torch.equal(a, b),
                     "argmax_equal": bool((a.argmax(-1) == b.argmax(-1)).all())}
    return {"model": "random weights, exact Qwen3-0.6B shapes", "context_len": context_len,
            "block_size": bs_block, "max_model_len": max_model_len, "backend": backend.name,
            "buckets": decode_buckets(n_max), "capture_s": capture_s, "reserved_mib_after_capture": mem_pool_mib,
            "steps": rows, "replay_vs_eager": checks}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=".gpu_e/config.json")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128,256")
    args = ap.parse_args(argv)
    prov = provenance(args)
    store, attn, prefill = check_store(), check_attention(), dense_vs_paged_prefill()
    (args.out / "attention_h200.json").write_text(json.dumps(
        {"provenance": prov, "store_kv": store, "scenarios": attn, "dense_vs_paged_prefill": prefill}, indent=1))
    graphs = check_graphs(args.config, [int(x) for x in args.batch_sizes.split(",")])
    (args.out / "cuda_graphs_h200.json").write_text(json.dumps({"provenance": prov, **graphs}, indent=1))
    print(f"\n== {prov['gpu']} torch {prov['torch']} triton {prov['triton']} flash-attn {prov['flash_attn']}")
    print(f"store {store['tokens']} tok: exact={store['exact']} untouched={store['skipped_slots_untouched']} "
          f"triton {store['triton_ms']:.3f} ms torch {store['torch_ms']:.3f} ms")
    for name, r in attn.items():
        print(f"{name:>16}: err {r['max_abs_err']:.1e} torch {r['torch_ms']:.3f} ms flash {r['flash_ms']:.3f} ms")
    print(f"prefill {prefill['tokens']} tok dense {prefill['dense_ms']:.3f} ms paged {prefill['paged_ms']:.3f} ms "
          f"equal={prefill['equal']}")
    print(f"graphs: capture {graphs['capture_s']:.1f} s for {len(graphs['buckets'])} buckets, "
          f"reserved {graphs['reserved_mib_after_capture']:.0f} MiB")
    for r in graphs["steps"]:
        print(f"  decode bs {r['batch_size']:>4}: eager {r['eager_ms']:.2f} ms graph {r['graph_ms']:.2f} ms "
              f"({r['eager_ms'] / r['graph_ms']:.1f}x)")
    for n, c in graphs["replay_vs_eager"].items():
        print(f"  replay vs eager bs {n}: {c}")


if __name__ == "__main__":
    main()
