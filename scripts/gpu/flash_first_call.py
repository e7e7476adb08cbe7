"""What a fresh process pays for its first flash-attn varlen call: the documented function against the extension.

Run ON THE GPU MACHINE from the repository root (flash-attn on PYTHONPATH); each variant runs in its own fresh
python process, since the cost is paid once per process:
  PYTHONPATH=/tmp/site:. python3 scripts/gpu/flash_first_call.py --out benchmarks/results/flash_first_call_h200.json
Variants: `public` calls flash_attn_varlen_func (a torch.library custom op); `extension` calls the kernel through
nanoserve's flash_functions (flash-attn's compiled extension); `dynamo_import` times `import torch._dynamo` alone.
"""
import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import json, sys, time
variant = sys.argv[1]
start = time.perf_counter()
import torch
import_torch = time.perf_counter() - start
torch.ones(1, device="cuda")
torch.cuda.synchronize()
result = {"import_torch_s": import_torch}
if variant == "dynamo_import":
    start = time.perf_counter()
    import torch._dynamo
    result["first_s"] = time.perf_counter() - start
else:
    dev, bf16 = "cuda", torch.bfloat16
    q = torch.randn(8192, 16, 128, device=dev, dtype=bf16)
    k = torch.randn(8192, 8, 128, device=dev, dtype=bf16)
    cu = torch.tensor([0, 4096, 8192], dtype=torch.int32, device=dev)
    if variant == "public":
        from flash_attn import flash_attn_varlen_func
        call = lambda: flash_attn_varlen_func(q, k, k, cu, cu, 4096, 4096, causal=True)
    else:
        from nanoserve.attention.flash import flash_functions
        varlen, _ = flash_functions()
        call = lambda: varlen(q, k, k, cu, cu, 4096, 4096, None)[0]
    torch.cuda.synchronize()
    result["dynamo_before"] = "torch._dynamo" in sys.modules
    outs = []
    for key in ("first_s", "second_s"):
        start = time.perf_counter()
        outs.append(call())
        torch.cuda.synchronize()
        result[key] = time.perf_counter() - start
    result["dynamo_after"] = "torch._dynamo" in sys.modules
    result["same_output"] = bool(torch.equal(outs[0], outs[1]))
print("RESULT " + json.dumps(result))
'''


def run_variant(variant: str) -> dict:
    """One fresh process: its measurements as a dict."""
    proc = subprocess.run([sys.executable, "-c", CHILD, variant], capture_output=True, text=True, timeout=300)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{variant} failed:\n{proc.stderr[-2000:]}")
    return json.loads(line[len("RESULT "):])


def main() -> None:
    """Each variant `--repeats` times in fresh processes, interleaved; JSON with provenance."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import flash_attn
    import torch

    runs = {v: [] for v in ("public", "extension", "dynamo_import")}
    for _ in range(args.repeats):
        for variant in runs:
            runs[variant].append(run_variant(variant))
    median = lambda xs: sorted(xs)[len(xs) // 2]
    summary = {v: median([r["first_s"] for r in rs]) for v, rs in runs.items()}
    Path(args.out).write_text(json.dumps({
        "what": "first and second flash-attn varlen call (2 x 4,096 tokens, 16/8 heads, head_dim 128, bf16) "
                "in fresh processes; first_s medians in `seconds`",
        "seconds": summary, "runs": runs,
        "provenance": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "flash_attn": flash_attn.__version__, "python": sys.version.split()[0],
                       "command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds")}}, indent=1))
    for variant, rs in runs.items():
        print(f"[flash-first] {variant:14s} first " + " ".join(f"{r['first_s']:.3f}" for r in rs) + " s"
              + ("" if variant == "dynamo_import" else
                 f" | second {rs[0]['second_s'] * 1e3:.2f} ms | dynamo imported after: {rs[0]['dynamo_after']}"))


if __name__ == "__main__":
    main()
