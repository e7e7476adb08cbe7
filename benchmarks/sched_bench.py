"""Host cost of one scheduler step without a model: 256 sequences, ~500-token prompts, ~200 decodes.

Usage: python benchmarks/sched_bench.py [--profile]
Prints µs per step (schedule + update, fake sampler) for both block managers and two block sizes.
"""
import cProfile
import pstats
import random
import sys
import time

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


def main():
    profile = "--profile" in sys.argv
    for cls in (BlockManager, PrefixCachingBlockManager):
        for bs in (256, 16):
            runs = [drive(make_run(cls, bs)) for _ in range(5)]
            steps, sec, dsteps, dsec = min(runs, key=lambda r: r[1])
            print(f"{cls.__name__:26s} block_size {bs:3d}: {steps} steps, {1e6 * sec / steps:6.1f} us/step; "
                  f"{dsteps} pure-decode steps, {1e6 * dsec / dsteps:6.1f} us/step")
            if profile:
                sched = make_run(cls, bs)
                prof = cProfile.Profile()
                prof.runcall(drive, sched)
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
