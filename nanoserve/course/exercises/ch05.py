"""Checkers for chapter 05's exercises (the scheduler)."""
import random

from nanoserve.course.simulate import run_workload
from nanoserve.engine.scheduler import Scheduler, SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.kv.blocks import BlockManager

__all__ = ["CHECKS"]


def _workload(seed: int = 0, n: int = 16) -> dict:
    """Requests with random lengths, two arriving every third step (chapter 05's busy workload, smaller)."""
    rng = random.Random(seed)
    arrivals = {}
    for i in range(n):
        prompt = [(7 * i + j) % 50 + 1 for j in range(rng.randint(4, 40))]
        arrivals.setdefault(3 * (i // 2), []).append(Sequence(i, prompt, max_tokens=rng.randint(4, 24)))
    return arrivals


def _tokens(arrivals: dict) -> list:
    return [s.token_ids for seqs in arrivals.values() for s in seqs]


def check_prefill_first(scheduler_class) -> str:
    """05.1: a scheduler whose steps are either prefill-only or decode-only, with unchanged results."""
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32, max_model_len=96)
    sched = scheduler_class(config, BlockManager(200, 4))
    assert isinstance(sched, Scheduler), "hint: subclass Scheduler and override schedule()"
    arrivals, reference = _workload(), _workload()
    records = run_workload(sched, arrivals)
    run_workload(Scheduler(config, BlockManager(200, 4)), reference)
    for r in records:
        assert not (r.num_prefill_tokens and r.num_decode_tokens), (
            f"hint: step {r.step} mixes {r.num_prefill_tokens} prefill and {r.num_decode_tokens} decode tokens")
        assert sum(r.num_new_tokens) <= 32, f"hint: step {r.step} exceeds the token budget"
    assert _tokens(arrivals) == _tokens(reference), "hint: the policy changed the generated tokens"
    prefill_steps = sum(1 for r in records if r.num_prefill_tokens)
    return f"{len(records)} steps, {prefill_steps} of them prefill-only"


def check_recompute_tokens(recompute_tokens) -> str:
    """05.4: prefill work spent on recompute after preemption, from a run's records."""
    results = []
    for num_blocks in (24, 40, 200):
        config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32, max_model_len=96)
        arrivals = _workload(seed=1)
        records = run_workload(Scheduler(config, BlockManager(num_blocks, 4)), arrivals)
        seqs = [s for group in arrivals.values() for s in group]
        want = sum(r.num_prefill_tokens for r in records) - sum(s.num_prompt_tokens for s in seqs)
        got = recompute_tokens(records, seqs)
        assert got == want, (f"hint: with {num_blocks} blocks you found {got} recomputed tokens, expected {want}: "
                             "every prefill token beyond the prompts themselves was computed twice")
        results.append(want)
    assert results[-1] == 0, "internal: the roomy pool should not preempt"
    return f"recomputed tokens for 24, 40, 200 blocks: {results}"


CHECKS = {"05.1": check_prefill_first, "05.4": check_recompute_tokens}
