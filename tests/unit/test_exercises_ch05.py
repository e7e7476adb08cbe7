"""Exercise 05.1's written answer quotes the measurement its solution really gives (chapter 05 prints only its own row)."""
import random

from course.simulate import latency_in_steps, token_steps
from course.solutions.ch05 import EXPLANATIONS, PrefillFirstScheduler
from nanoserve.engine.scheduler import Scheduler, SchedulerConfig
from nanoserve.engine.sequence import Sequence
from nanoserve.kv.blocks import BlockManager


def _busy_workload(seed=0, n=24) -> dict:
    """Chapter 05's busy workload: random lengths, two requests arriving every third step."""
    rng = random.Random(seed)
    specs = [(rng.randint(4, 48), rng.randint(4, 32)) for _ in range(n)]
    arrivals = {}
    for i, (p, m) in enumerate(specs):
        seq = Sequence(i, [(7 * i + j) % 50 + 1 for j in range(p)], max_tokens=m)
        arrivals.setdefault(3 * (i // 2), []).append(seq)
    return arrivals


def _row(policy) -> str:
    arrivals = _busy_workload()
    sched = policy(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=32, max_model_len=96), BlockManager(100, 4))
    records, when = token_steps(sched, arrivals)
    lat = latency_in_steps(arrivals, when)
    return f"{len(records):5}  {lat['mean_first_token']:23.1f}  {lat['max_gap']:26}"


def test_05_1_answer_quotes_the_measured_rows():
    text = EXPLANATIONS["05.1"]
    assert f"{'mixed, decode first':<22} {_row(Scheduler)}" in text
    assert f"{'prefill first':<22} {_row(PrefillFirstScheduler)}" in text
