"""Checkers for chapter 05's exercises (the scheduler)."""
import random
import sys

from course.simulate import run_workload
from nanoserve.engine.scheduler import Scheduler, SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.kv.blocks import BlockManager

__all__ = ["CHECKS"]


def _workload(seed: int = 0, n: int = 16, sequence_class=Sequence) -> dict:
    """Requests with random lengths, two arriving every third step (chapter 05's busy workload, smaller)."""
    Sequence = sequence_class  # noqa: N806
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


def _trace(scheduler_class, config, manager, arrivals) -> list:
    return [(r.seq_ids, r.num_new_tokens, r.preempted) for r in run_workload(scheduler_class(config, manager), arrivals)]


def _own(scheduler_class, name, default):
    """The class `name` as the scheduler's own module defines it: a notebook has its own copies of the package's."""
    return getattr(sys.modules.get(scheduler_class.__module__), name, default)


def check_scheduler_step(scheduler_class) -> str:
    """05.6 (build it yourself): schedule() makes exactly the steps of the chapter's Scheduler."""
    from nanoserve.kv.prefix import PrefixCachingBlockManager

    # by name: a chapter's notebook defines its own copy of the class the package exports
    assert any(c.__name__ == "Scheduler" for c in getattr(scheduler_class, "__mro__", ())), \
        "hint: subclass Scheduler and override schedule()"
    cases = [("a roomy pool", SchedulerConfig(8, 32, 96), lambda: BlockManager(200, 4)),
             ("a tight pool (preemption)", SchedulerConfig(8, 32, 96), lambda: BlockManager(30, 4)),
             ("a prefix cache", SchedulerConfig(6, 24, 96), lambda: PrefixCachingBlockManager(60, 4))]
    config_class, sequence_class = (_own(scheduler_class, "SchedulerConfig", SchedulerConfig),
                                    _own(scheduler_class, "Sequence", Sequence))
    for name, config, manager in cases:
        want = _trace(Scheduler, config, manager(), _workload(1))
        own_config = config_class(config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len)
        got = _trace(scheduler_class, own_config, manager(), _workload(1, sequence_class=sequence_class))
        for step, (g, w) in enumerate(zip(got, want)):
            assert g == w, (f"hint: with {name}, step {step} differs: (seq ids, new tokens, preempted) is {g}, "
                            f"the chapter's scheduler makes {w}; decodes first, each running prefill gets the "
                            "budget left after the decodes still to come, then admissions")
        assert len(got) == len(want), f"hint: with {name} your scheduler took {len(got)} steps, not {len(want)}"
    return "the rest of the chapter can run on it: set USE_MY_SCHEDULER = True and re-run"


CHECKS = {"05.6": check_scheduler_step, "05.1": check_prefill_first, "05.4": check_recompute_tokens}
