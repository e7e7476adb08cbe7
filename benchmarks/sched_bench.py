"""Host cost of one scheduler step without a model: 256 sequences (--seqs), ~500-token prompts, ~200 decodes.

Usage: python benchmarks/sched_bench.py [--profile] [--engine] [--seqs N] [--churn [--repeats K] [--out FILE]]
Prints µs per step (schedule + update, fake sampler) for both block managers and two block sizes.
--engine: also LLM.generate at batch N on a tiny checkpoint with the model forward stubbed out
(greedy, prefix caching on), reporting host µs per step and the part spent in schedule / update.
--seqs N: number of sequences (default 256; a small N such as 16 is a quick smoke run).
--churn: nanobench's high-churn workload through LLM.generate, model stubbed, one step ahead as on a GPU.
"""
import argparse
import cProfile
import pstats
import random
import time
from pathlib import Path

from nanoserve.engine.scheduler import Scheduler, SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.kv.blocks import BlockManager
from nanoserve.kv.prefix import PrefixCachingBlockManager


def make_run(manager_cls, block_size, num_seqs=256, seed=0):
    rng = random.Random(seed)
    seqs = [Sequence(i, [rng.randrange(10000) for _ in range(rng.randint(450, 550))], rng.randint(180, 220))
            for i in range(num_seqs)]
    max_len = 1024
    num_blocks = num_seqs * (-(-max_len // block_size)) + 8
    sched = Scheduler(SchedulerConfig(max_num_seqs=num_seqs, max_num_batched_tokens=16384, max_model_len=max_len),
                      manager_cls(num_blocks, block_size))
    for s in seqs:
        sched.add(s)
    return sched


def drive(sched):
    """Step to completion with a cheap fake sampler; return (steps, seconds, decode steps, their seconds)."""
    steps = decode_steps = 0
    total = decode = 0.0
    clock = time.perf_counter
    while sched.has_unfinished():
        t0 = clock()
        batch = sched.schedule()
        sched.update(batch, [7 if smp else None for smp in batch.samples])
        dt = clock() - t0
        steps, total = steps + 1, total + dt
        if sum(batch.num_new_tokens) == len(batch.seqs):  # every sequence computes one token
            decode_steps, decode = decode_steps + 1, decode + dt
    return steps, total, decode_steps, decode


def stubbed_llm(**options):
    """A tiny-checkpoint LLM on the CPU whose model forward returns zeros: what is left is the host's work."""
    import tempfile

    import torch

    from nanoserve.llm import LLM
    from nanoserve.model.tiny import make_tiny_checkpoint

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        llm = LLM(str(make_tiny_checkpoint(tmp, seed=0)), skip_tokenizer_init=True, device="cpu", **options)
    runner = llm.engine.core.executor  # the CPU ModelRunner: forward(StepInputs) -> logits of the rows to sample
    vocab = runner.model_config.vocab_size
    runner.forward = lambda step: torch.zeros(len(step.logits_indices), vocab, dtype=runner.dtype)
    return llm


def engine_run(block_size, num_seqs=256):
    """Host µs per step of LLM.generate (num_seqs requests, model stubbed) and of schedule / update inside it."""
    from nanoserve.sampling import SamplingParams

    llm = stubbed_llm(max_model_len=2048, num_kv_blocks=num_seqs * 2048 // block_size + 8, block_size=block_size,
                      max_num_seqs=num_seqs, max_num_batched_tokens=16384)
    core, runner = llm.engine.core, llm.engine.core.executor
    rng = random.Random(0)
    prompts = [{"prompt_token_ids": [rng.randrange(500) for _ in range(rng.randint(100, 1024))]}
               for _ in range(num_seqs)]
    params = [SamplingParams(max_tokens=rng.randint(100, 300), temperature=0.0, ignore_eos=True)
              for _ in range(num_seqs)]
    llm.generate(prompts[:2], params[:2], use_tqdm=False)  # warm-up
    sched, spent, steps = core.scheduler, {"schedule": 0.0, "update": 0.0}, [0]

    def timed(name):
        method = getattr(sched, name)

        def run(*args):
            t0 = time.perf_counter()
            result = method(*args)
            spent[name] += time.perf_counter() - t0
            steps[0] += name == "schedule"
            return result
        return run

    sched.schedule, sched.update = timed("schedule"), timed("update")
    t0 = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    if runner.num_eager_steps:  # the stub was bypassed: the numbers would include the model
        raise RuntimeError("the real model forward ran; the stub no longer replaces ModelRunner.forward")
    n = steps[0]
    print(f"LLM.generate, model stubbed, block_size {block_size:3d}: {n} steps, {1e6 * wall / n:6.0f} us/step host; "
          f"schedule {1e6 * spent['schedule'] / n:4.0f}, update {1e6 * spent['update'] / n:4.0f} us/step")


def churn_run(repeats: int = 5, out=None) -> dict:
    """Host µs per step of nanobench's high-churn workload through LLM.generate, model stubbed, scheduled one step
    ahead as on a GPU (its 1,024 requests; 256 sequences at a time, 8,192 tokens a step)."""
    import json
    import statistics

    from nanobench.provenance import collect_provenance, utc_now
    from nanobench.workloads import make_workload
    from nanoserve.sampling import SamplingParams

    llm = stubbed_llm(max_model_len=2048, max_num_seqs=256, max_num_batched_tokens=8192, async_scheduling=True)
    requests = make_workload("high-churn", max_token_id=llm.engine.core.executor.model_config.vocab_size - 1)
    prompts = [{"prompt_token_ids": list(r.prompt_token_ids)} for r in requests]
    params = [SamplingParams(temperature=0.0, max_tokens=r.max_tokens, ignore_eos=True) for r in requests]
    llm.generate(prompts[:4], params[:4], use_tqdm=False)  # warm-up
    engine, steps, per_step = llm.engine, [0], []
    step = engine.step
    engine.step = lambda: steps.__setitem__(0, steps[0] + 1) or step()
    for _ in range(repeats):
        steps[0], t0 = 0, time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        per_step.append(1e6 * (time.perf_counter() - t0) / steps[0])
    if engine.core.executor.num_eager_steps:  # the stub was bypassed: the numbers would include the model
        raise RuntimeError("the real model forward ran; the stub no longer replaces ModelRunner.forward")
    result = {"workload": "high-churn", "requests": len(requests), "steps": steps[0], "repeats": repeats,
              "us_per_step": round(statistics.median(per_step)), "us_per_step_runs": [round(x) for x in per_step],
              "command": "python benchmarks/sched_bench.py --churn", "date": utc_now(),
              "provenance": collect_provenance()}
    print(f"high-churn through LLM.generate, model stubbed, one step ahead: {steps[0]} steps, "
          f"{result['us_per_step']} us/step host (median of {repeats}: {result['us_per_step_runs']})")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="cProfile one run per setting")
    parser.add_argument("--engine", action="store_true", help="also time LLM.generate with the model stubbed")
    parser.add_argument("--seqs", type=int, default=256, help="number of sequences (default 256)")
    parser.add_argument("--churn", action="store_true", help="also time the high-churn workload, model stubbed")
    parser.add_argument("--repeats", type=int, default=5, help="--churn: runs of the workload (default 5)")
    parser.add_argument("--out", help="--churn: write its result, with provenance, to this JSON file")
    args = parser.parse_args()
    if args.seqs < 1:
        raise ValueError(f"--seqs must be at least 1, got {args.seqs}")
    for cls in (BlockManager, PrefixCachingBlockManager):
        for bs in (256, 16):
            runs = [drive(make_run(cls, bs, args.seqs)) for _ in range(5)]
            steps, sec, dsteps, dsec = min(runs, key=lambda r: r[1])
            print(f"{cls.__name__:26s} block_size {bs:3d}: {steps} steps, {1e6 * sec / steps:6.1f} us/step; "
                  f"{dsteps} pure-decode steps, {1e6 * dsec / dsteps:6.1f} us/step")
            if args.profile:
                sched = make_run(cls, bs, args.seqs)
                prof = cProfile.Profile()
                prof.runcall(drive, sched)
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    if args.engine:
        for bs in (256, 16):
            engine_run(bs, args.seqs)
    if args.churn:
        churn_run(args.repeats, args.out)


if __name__ == "__main__":
    main()
