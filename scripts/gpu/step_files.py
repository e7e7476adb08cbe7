"""Which package files one steady-state decode step runs on the host: a profile hook over one `engine.step()`.

Run with the tree under test first on PYTHONPATH (ON THE GPU MACHINE for the number the issue asks for: there a
decode step replays a CUDA graph, so the model's own files run on the GPU, not in Python):
  PYTHONPATH=/tmp/site:$TREE python3 scripts/gpu/step_files.py --model /tmp/qwen3-0.6b --out /tmp/step_files.json
Counts every Python function entered (sys.setprofile) during one `LLMEngine.step()` taken after the batch is
decoding, and prints the package files they live in, in the order first entered.
"""
import argparse
import json
import sys
from pathlib import Path


def files_of_one_step(engine) -> list:
    """[(file relative to the repository root, calls)] of one engine.step(), in the order first entered."""
    import nanoserve

    root = Path(nanoserve.__file__).resolve().parent.parent
    calls = {}

    def hook(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            calls[path] = calls.get(path, 0) + 1

    sys.setprofile(hook)
    try:
        engine.step()
    finally:
        sys.setprofile(None)
    out = []
    for path, n in calls.items():
        p = Path(path).resolve()
        if p.is_relative_to(root) and p.parts[len(root.parts)] in ("nanoserve",):
            out.append((str(p.relative_to(root)), n))
    return out


def main() -> None:
    """Start a batch decoding, then profile one step of it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    from nanoserve import LLM, SamplingParams

    llm = LLM(args.model, gpu_memory_utilization=0.5, skip_tokenizer_init=True)
    engine = llm.llm_engine
    params = SamplingParams(temperature=0.6, max_tokens=64, ignore_eos=True)
    for i in range(args.batch):
        engine.add_request(f"r{i}", {"prompt_token_ids": list(range(10 + i, 138 + i))}, params)
    for _ in range(6):  # prefill, then a few decode steps: the steady state
        engine.step()
    files = files_of_one_step(engine)
    per_step = [[f for f, _ in files_of_one_step(engine)] for _ in range(16)]  # the next 16 decode steps
    union = sorted({f for step in per_step for f in step} | {f for f, _ in files})
    result = {"model": args.model, "batch": args.batch, "num_files": len(files),
              "files": [{"file": f, "calls": n} for f, n in files],
              "files_per_step_next_16": [len(step) for step in per_step], "union_of_17_steps": union,
              "eager_steps": getattr(engine.stats, "eager_steps", None),
              "note": "package files whose Python functions were entered during one steady-state decode step"}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"[step-files] {len(files)} package files in one decode step at batch {args.batch}:")
    for f, n in files:
        print(f"[step-files]   {f:45s} {n:5d} calls")
    print(f"[step-files] the next 16 steps: {result['files_per_step_next_16']} files; union of all 17: "
          f"{len(union)}: {', '.join(f for f in union if f not in dict(files))}")
    llm.shutdown()


if __name__ == "__main__":
    main()
