"""Soak the engine: many random requests on a tight KV pool, checked against a roomy reference engine.

Greedy rows (with random stop strings, stop tokens, min_tokens and penalties) must equal a roomy
engine's output token for token; every request must finish; no KV block may stay allocated.
Usage: python scripts/soak.py --seconds 240 [--seed 0] [--threads 3] [--tight-blocks 24]
"""
import argparse
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from nanoserve.llm import LLM
from nanoserve.model.tiny import make_tiny_checkpoint
from nanoserve.sampling import SamplingParams

STOPS = ["e", "a", "t", " ", ",", ".", "s", "in", "0"]  # short strings a byte-level vocabulary of 512 produces


@dataclass
class SoakStats:
    """What a soak run saw."""

    requests: int = 0
    greedy_checked: int = 0
    mismatches: int = 0
    unfinished: int = 0
    preemptions: int = 0
    leaked_blocks: int = 0
    rounds: int = 0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    errors: list = field(default_factory=list)


def rss_mib() -> float:
    """Resident set size of this process (Linux /proc), in MiB."""
    import os

    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def random_params(rng: random.Random, greedy: bool, vocab: int) -> SamplingParams:
    """Random but valid settings; greedy rows keep everything that stays deterministic."""
    max_tokens = rng.randint(1, 24)
    kw = dict(max_tokens=max_tokens, min_tokens=rng.randint(0, max_tokens) if rng.random() < 0.3 else 0,
              ignore_eos=rng.random() < 0.5)
    if rng.random() < 0.4:
        kw["stop"] = rng.sample(STOPS, rng.randint(1, 3))
    if rng.random() < 0.2:
        kw["stop_token_ids"] = [rng.randrange(vocab) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        kw["repetition_penalty"] = rng.choice([0.5, 1.2, 2.0])
    if rng.random() < 0.2:
        kw["frequency_penalty"] = rng.uniform(-2, 2)
    if rng.random() < 0.2:
        kw["logprobs"] = rng.randint(0, 5)
    if greedy:
        return SamplingParams(temperature=0, **kw)
    kw.update(temperature=rng.choice([0.3, 0.8, 1.0, 1.5]), n=rng.choice([1, 1, 2]))
    if rng.random() < 0.5:
        kw["top_p"] = rng.choice([1e-9, 0.5, 0.9])
    if rng.random() < 0.5:
        kw["top_k"] = rng.choice([1, 5, 50, 2**40])
    if rng.random() < 0.3:
        kw["min_p"] = rng.choice([0.05, 0.2])
    if rng.random() < 0.5:
        kw["seed"] = rng.randrange(2**32)
    return SamplingParams(**kw)


def random_prompt(rng: random.Random) -> str:
    """Digits and spaces: each encodes to one id below 512, so every prompt fits the tiny vocabulary."""
    return "".join(rng.choice("0123456789 ") for _ in range(rng.randint(1, 30)))


def build_engines(workdir: Path, tight_blocks: int):
    """(tight, roomy): the same tiny checkpoint; the tight one preempts, the roomy one never does."""
    ckpt = make_tiny_checkpoint(workdir / "soak-tiny", seed=3, with_tokenizer=True, vocab_size=512,
                                tie_word_embeddings=False, max_position_embeddings=256)
    common = dict(device="cpu", block_size=4, max_num_batched_tokens=48, max_num_seqs=16, seed=0)
    tight = LLM(ckpt, num_kv_blocks=tight_blocks, **common)
    roomy = LLM(ckpt, num_kv_blocks=2048, enable_prefix_caching=False, **common)
    return tight, roomy


def one_round(tight: LLM, roomy: LLM, rng: random.Random, stats: SoakStats, threads: int) -> None:
    """A batch of random requests on the tight engine from `threads` consumers (generate and streams)."""
    vocab = tight.engine.vocab_size
    jobs = []
    for _ in range(rng.randint(4, 12)):
        greedy = rng.random() < 0.5
        jobs.append((random_prompt(rng), random_params(rng, greedy, vocab), greedy, rng.random() < 0.3))
    results = [None] * len(jobs)

    def consume(indices):
        try:
            plain = [i for i in indices if not jobs[i][3]]
            if plain:
                outs = tight.generate([jobs[i][0] for i in plain], [jobs[i][1] for i in plain], use_tqdm=False)
                for i, out in zip(plain, outs):
                    results[i] = [(c.token_ids, c.finish_reason) for c in out.outputs]
            for i in indices:
                if jobs[i][3]:  # a stream (n=1 rows only are compared)
                    ids, reason = [], None
                    for delta in tight.stream(jobs[i][0], jobs[i][1]):
                        if delta.index == 0:
                            ids += delta.token_ids
                            reason = delta.finish_reason or reason
                    results[i] = [(ids, reason)]
        except Exception as e:  # recorded, the soak goes on
            stats.errors.append(repr(e))

    groups = [list(range(k, len(jobs), threads)) for k in range(threads)]
    workers = [threading.Thread(target=consume, args=(g,)) for g in groups if g]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stats.requests += len(jobs)
    stats.rounds += 1
    for (prompt, params, greedy, _), got in zip(jobs, results):
        if got is None or any(reason is None for _, reason in got):
            stats.unfinished += 1
            continue
        if greedy:
            want = roomy.generate(prompt, params, use_tqdm=False)[0].outputs[0]
            stats.greedy_checked += 1
            if got[0] != (want.token_ids, want.finish_reason):
                stats.mismatches += 1


def leaked_blocks(llm: LLM) -> int:
    """Blocks still allocated when no request is live (prefix-cached free blocks count as free)."""
    engine = llm.engine
    return engine.num_kv_blocks - engine.block_manager.num_free_blocks


def soak(seconds: float, seed: int = 0, threads: int = 3, tight_blocks: int = 24, workdir=None,
         log=None) -> SoakStats:
    """Run rounds until `seconds` have passed; return the counts."""
    rng = random.Random(seed)
    stats = SoakStats()
    with tempfile.TemporaryDirectory() as tmp:
        tight, roomy = build_engines(Path(workdir or tmp), tight_blocks)
        stats.rss_start_mib = rss_mib()
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            one_round(tight, roomy, rng, stats, threads)
            if log and stats.rounds % 20 == 0:
                log(f"{time.perf_counter() - start:6.0f} s: {stats.requests} requests, "
                    f"{tight.engine.scheduler.num_preemptions} preemptions, {stats.mismatches} mismatches")
        stats.preemptions = tight.engine.scheduler.num_preemptions
        stats.leaked_blocks = leaked_blocks(tight) + leaked_blocks(roomy)
        stats.rss_end_mib = rss_mib()
        tight.shutdown()
        roomy.shutdown()
    return stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--tight-blocks", type=int, default=24)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    s = soak(args.seconds, args.seed, args.threads, args.tight_blocks, log=print)
    print(f"wall {time.perf_counter() - start:.0f} s | rounds {s.rounds} | requests {s.requests} | "
          f"greedy checked {s.greedy_checked} | preemptions {s.preemptions} | mismatches {s.mismatches} | "
          f"unfinished {s.unfinished} | leaked blocks {s.leaked_blocks} | errors {len(s.errors)} | "
          f"RSS {s.rss_start_mib:.0f} -> {s.rss_end_mib:.0f} MiB")
    for e in s.errors[:5]:
        print("error:", e)
    return 0 if not (s.mismatches or s.unfinished or s.leaked_blocks or s.errors) else 1


if __name__ == "__main__":
    sys.exit(main())
