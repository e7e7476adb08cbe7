"""The one-pass sampler before and after four numbers per Philox call (chapter 10, section 7), on a GPU.

Run ON THE GPU MACHINE from the repository root, with the earlier kernel's module as a file:
    git show f699d9f:nanoserve/kernels/sampling.py > /tmp/sampling_before.py
    python scripts/gpu/rand4x_probe.py --before /tmp/sampling_before.py [--out DIR] [--tag h100]
Both kernels on bf16 logits of Qwen3's vocabulary at 1, 8, 64 and 256 rows, T = 0.6, each in a CUDA graph over 4
logits buffers, in turn A B A B; greedy rows checked equal to argmax. Writes rand4x_<tag>.json and prints a table.
"""
import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_timing import graph_us  # noqa: E402  (this script's folder)

VOCAB = 151936


def load_module(path: str):
    spec = importlib.util.spec_from_file_location("sampling_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="gpu")
    args = parser.parse_args()
    from nanobench.provenance import collect_provenance, command_line, utc_now
    from nanoserve.kernels import sampling

    arms = {"tl.rand": load_module(args.before).sample_rows, "tl.rand4x": sampling.sample_rows}
    torch.manual_seed(0)
    rows_out = []
    for rows in (1, 8, 64, 256):
        logits = [torch.randn(rows, VOCAB, device="cuda").to(torch.bfloat16) * 3 for _ in range(4)]
        temps, greedy = torch.full((rows,), 0.6, device="cuda"), torch.zeros(rows, dtype=torch.int32, device="cuda")
        ones = torch.ones(rows, dtype=torch.int32, device="cuda")
        row = {"rows": rows, "us": {name: [] for name in arms}}
        for name, fn in arms.items():
            row[f"greedy_equals_argmax_{name}"] = torch.equal(fn(logits[0], temps, ones), logits[0].argmax(dim=1))
        for _ in range(2):
            for name, fn in arms.items():
                row["us"][name].append(graph_us([lambda x=x, fn=fn: fn(x, temps, greedy) for x in logits]))
        rows_out.append(row)
        print(f"rows {rows:3d}: " + ", ".join(f"{n} {statistics.median(v):6.1f} µs" for n, v in row["us"].items()),
              flush=True)
    result = {"date": utc_now(), "command": command_line(sys.argv), "provenance": collect_provenance(),
              "config": {"vocab": VOCAB, "temperature": 0.6, "before": "nanoserve f699d9f's sample_rows (tl.rand)",
                         "timing": "a CUDA graph of one call per logits buffer (4), replayed 20 times; arms in turn, "
                                   "twice"},
              "kernels": rows_out}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"rand4x_{args.tag}.json").write_text(json.dumps(result, indent=1))
    print("\nrows | tl.rand µs | tl.rand4x µs | greedy exact")
    for r in rows_out:
        print(f"{r['rows']:4d} | {' · '.join(f'{x:.1f}' for x in r['us']['tl.rand']):>12} | "
              f"{' · '.join(f'{x:.1f}' for x in r['us']['tl.rand4x']):>12} | "
              f"{r['greedy_equals_argmax_tl.rand'] and r['greedy_equals_argmax_tl.rand4x']}")


if __name__ == "__main__":
    main()
