"""Model-free simulation of the scheduler: fake sampling, step records, queue snapshots (a teaching aid of chapter 05).

Hand-written (not exported by a chapter): chapter 05 and the scheduler tests drive the scheduler with it.
"""
from dataclasses import dataclass

from nanoserve.engine.scheduler import ScheduledBatch


def content_token(seq, vocab_size: int = 1000) -> int:
    """A deterministic fake 'sampled' token that depends only on the sequence's tokens."""
    return (31 * sum(seq.token_ids) + 7 * seq.num_tokens) % vocab_size


@dataclass
class StepRecord:
    """What one scheduler step did."""

    step: int
    seq_ids: list
    num_new_tokens: list
    num_prefill_tokens: int
    num_decode_tokens: int
    preempted: list
    finished: list
    num_used_blocks: int
    num_free_blocks: int
    num_waiting: int
    num_running: int


def split_prefill_decode(batch: ScheduledBatch) -> tuple:
    """(prefill tokens, decode tokens) of a batch; a decode is the 1 new token of a sequence with output."""
    decode = sum(1 for s, n, smp in zip(batch.seqs, batch.num_new_tokens, batch.samples)
                 if n == 1 and smp and s.num_output_tokens > 0)
    return batch.num_batched_tokens - decode, decode


def run_workload(scheduler, arrivals, sample=content_token, max_steps: int = 100_000) -> list:
    """Add requests as they arrive, step the scheduler until all finish; return a StepRecord per step.

    `arrivals` is a list of sequences (all arrive at step 0) or a dict {step: [sequences]}.
    """
    pending = {0: list(arrivals)} if isinstance(arrivals, (list, tuple)) else {k: list(v) for k, v in arrivals.items()}
    manager, records = scheduler.block_manager, []
    for step in range(max_steps):
        for seq in pending.pop(step, []):
            scheduler.add(seq)
        if not scheduler.has_unfinished() and not pending:
            return records
        batch = scheduler.schedule()
        if batch.is_empty and scheduler.has_unfinished():
            raise RuntimeError(f"step {step}: nothing scheduled although work remains")
        prefill, decode = split_prefill_decode(batch)
        ids = [s.seq_id for s in batch.seqs]
        finished = scheduler.update(batch, [sample(s) if smp else None for s, smp in zip(batch.seqs, batch.samples)])
        records.append(StepRecord(step, ids, list(batch.num_new_tokens), prefill, decode,
                                  [s.seq_id for s in batch.preempted], [s.seq_id for s in finished],
                                  manager.num_blocks - manager.num_free_blocks, manager.num_free_blocks,
                                  scheduler.num_waiting, scheduler.num_running))
    raise RuntimeError(f"workload did not finish within {max_steps} steps")


def format_trace(records) -> str:
    """One line per step: step, (seq id: new tokens), preempted, finished, free blocks."""
    lines = []
    for r in records:
        work = " ".join(f"{i}:{n}" for i, n in zip(r.seq_ids, r.num_new_tokens))
        extra = (f" preempt={r.preempted}" if r.preempted else "") + (f" done={r.finished}" if r.finished else "")
        lines.append(f"step {r.step:3d} | {work:<30} | free {r.num_free_blocks:3d}{extra}")
    return "\n".join(lines)


def snapshot(scheduler) -> dict:
    """A plain-data picture of the queues and the block pool."""
    def describe(seq):
        return {"id": seq.seq_id, "tokens": seq.num_tokens, "computed": seq.num_computed_tokens,
                "outputs": seq.num_output_tokens, "blocks": list(seq.block_table),
                "preemptions": seq.num_preemptions}

    manager = scheduler.block_manager
    owners = {}
    for seq in scheduler.running:
        for block in seq.block_table:
            owners.setdefault(block, []).append(seq.seq_id)
    return {"waiting": [describe(s) for s in scheduler.waiting],
            "running": [describe(s) for s in scheduler.running],
            "num_blocks": manager.num_blocks, "num_free_blocks": manager.num_free_blocks,
            "block_size": manager.block_size, "block_owners": owners}


def render_snapshot(snap: dict, row: int = 32) -> str:
    """Text view of a snapshot: queues, then the pool ('.' free, the owner's id, '*' shared)."""
    def seq_line(s):
        return f"  seq {s['id']}: {s['computed']}/{s['tokens']} computed, {s['outputs']} out, blocks {s['blocks']}"

    lines = [f"waiting ({len(snap['waiting'])})"] + [seq_line(s) for s in snap["waiting"]]
    lines += [f"running ({len(snap['running'])})"] + [seq_line(s) for s in snap["running"]]
    cells = []
    for b in range(snap["num_blocks"]):
        ids = snap["block_owners"].get(b, [])
        cells.append("." if not ids else "*" if len(ids) > 1 else str(ids[0])[-1])
    lines.append(f"block pool: {snap['num_free_blocks']} of {snap['num_blocks']} free (block size {snap['block_size']})")
    lines += ["  " + " ".join(cells[i:i + row]) for i in range(0, len(cells), row)]
    return "\n".join(lines)


def token_steps(scheduler, arrivals, sample=content_token) -> tuple:
    """run_workload, also noting at which step each sequence got each token: (records, {seq_id: [steps]})."""
    steps, when = [0], {}
    schedule = scheduler.schedule

    def counting_schedule():
        steps[0] += 1
        return schedule()

    def noting_sample(seq):
        when.setdefault(seq.seq_id, []).append(steps[0] - 1)
        return sample(seq)

    scheduler.schedule = counting_schedule
    try:
        records = run_workload(scheduler, arrivals, noting_sample)
    finally:
        del scheduler.schedule
    return records, when


def latency_in_steps(arrivals: dict, when: dict) -> dict:
    """Mean steps from arrival to first token, and the longest gap between two tokens of one sequence."""
    arrived = {s.seq_id: step for step, seqs in arrivals.items() for s in seqs}
    first = [when[i][0] - arrived[i] for i in arrived]
    gaps = [b - a for steps in when.values() for a, b in zip(steps, steps[1:])]
    return {"mean_first_token": sum(first) / len(first), "max_gap": max(gaps, default=0)}
