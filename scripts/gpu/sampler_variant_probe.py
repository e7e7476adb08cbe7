"""Chapter 10's one-pass sampler against a variant of it (another version of its module), on a GPU.

Run ON THE GPU MACHINE from the repository root; chapter 10's recorded run timed the tree of f699d9f (labelled
tl.rand) against the four-numbers-per-Philox-call kernel of 9f5af32 (tl.rand4x):
    git show f699d9f:nanoserve/kernels/sampling.py > /tmp/a.py; git show 9f5af32:nanoserve/kernels/sampling.py > /tmp/b.py
    python scripts/gpu/sampler_variant_probe.py --arm tl.rand=/tmp/a.py --arm tl.rand4x=/tmp/b.py [--out DIR] [--tag h200]
(an arm without a file, --arm NAME, is this tree's sampler). Each arm on bf16 logits of Qwen3's vocabulary at 1, 8,
64 and 256 rows, T = 0.6, in a CUDA graph over 4 logits buffers, arms in turn, twice; greedy rows checked equal to
argmax. Writes sampler_variants_<tag>.json and prints a table.
"""
import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_timing import QWEN3_VOCAB, sampler_rows  # noqa: E402  (this script's folder)


def load_module(path: str):
    """A version of nanoserve/kernels/sampling.py, imported from its file."""
    spec = importlib.util.spec_from_file_location("sampling_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arm", action="append", required=True, help="NAME=FILE, or NAME for this tree's sampler")
    parser.add_argument("--out", default=".")
    parser.add_argument("--tag", default="gpu")
    args = parser.parse_args()
    from nanobench.provenance import collect_provenance, command_line, utc_now
    from nanoserve.kernels import sampling

    named = [a.partition("=") for a in args.arm]
    if len({name for name, _, _ in named}) < len(named):
        raise SystemExit(f"each --arm needs a name of its own, got {args.arm}")
    arms = {name: load_module(path).sample_rows if path else sampling.sample_rows for name, _, path in named}
    torch.manual_seed(0)
    rows_out = sampler_rows(arms, reps=2)
    result = {"date": utc_now(), "command": command_line(sys.argv), "provenance": collect_provenance(),
              "config": {"vocab": QWEN3_VOCAB, "temperature": 0.6, "arms": args.arm,
                         "timing": "a CUDA graph of one call per logits buffer (4), replayed 20 times; arms in turn, "
                                   "twice"},
              "kernels": rows_out}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, f"sampler_variants_{args.tag}.json").write_text(json.dumps(result, indent=1))
    print("\nrows | " + " | ".join(f"{name} µs" for name in arms) + " | greedy exact")
    for r in rows_out:
        print(f"{r['rows']:4d} | " + " | ".join(" · ".join(f"{x:.1f}" for x in r["us"][name]) for name in arms)
              + f" | {all(r['greedy_equals_argmax'].values())}")


if __name__ == "__main__":
    main()
