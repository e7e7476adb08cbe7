"""What a process's first GPU calls cost: each op the KV-sizing profile run needs, timed on its first and second call.

Run ON THE GPU MACHINE in a fresh process (flash-attn on PYTHONPATH), before anything else touched CUDA:
  PYTHONPATH=/tmp/site python3 scripts/gpu/first_call_probe.py --out /tmp/first_calls.json
The profile run of nanoserve's constructor is the process's first forward pass; this splits what such a first
pass pays once (CUDA context, library and kernel loading) from what every pass pays.
"""
import argparse
import json
import time
from pathlib import Path


def timed(fn) -> float:
    """Seconds of one call of `fn`, synchronised."""
    import torch

    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    """Time the first and the second call of each op, in the order a forward pass meets them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    start = time.perf_counter()
    import torch

    ops = {"import torch": time.perf_counter() - start}
    ops["CUDA context (torch.cuda.init + a tiny tensor)"] = timed(lambda: torch.ones(1, device="cuda"))
    dev, bf16 = "cuda", torch.bfloat16
    x = torch.randn(8192, 1024, device=dev, dtype=bf16)
    w = torch.randn(3072, 1024, device=dev, dtype=bf16)
    table = [("embedding gather", lambda: torch.nn.functional.embedding(torch.zeros(8192, dtype=torch.long,
                                                                                    device=dev), x)),
             ("bf16 GEMM 8192x1024x3072 (cuBLAS)", lambda: x @ w.T),
             ("bf16 GEMM 1x1024x3072", lambda: x[:1] @ w.T),
             ("softmax + sort over 256 x 151,936 (sampler)",
              lambda: torch.sort(torch.softmax(torch.randn(256, 151936, device=dev), -1), -1, descending=True)),
             ("exponential race (torch.rand_like, argmax)",
              lambda: (torch.randn(256, 151936, device=dev) / torch.rand(256, 151936, device=dev)).argmax(-1))]
    try:
        from flash_attn import flash_attn_varlen_func

        q = torch.randn(8192, 16, 128, device=dev, dtype=bf16)
        k = torch.randn(8192, 8, 128, device=dev, dtype=bf16)
        cu = torch.tensor([0, 4096, 8192], dtype=torch.int32, device=dev)
        table.append(("flash-attn varlen, 2 x 4,096 tokens",
                      lambda: flash_attn_varlen_func(q, k, k, cu, cu, 4096, 4096, causal=True)))
    except ImportError:
        pass
    for name, fn in table:
        ops[f"{name}: first call"] = timed(fn)
        ops[f"{name}: second call"] = timed(fn)
    ops["torch.cuda.mem_get_info"] = timed(lambda: torch.cuda.mem_get_info())
    Path(args.out).write_text(json.dumps({"seconds": ops, "torch": torch.__version__,
                                          "device": torch.cuda.get_device_name()}, indent=1))
    for name, seconds in ops.items():
        print(f"[first-call] {name:60s} {1e3 * seconds:9.1f} ms")


if __name__ == "__main__":
    main()
