"""Solutions to chapter 05's exercises, typical mistakes the checkers reject, and written answers."""
from nanoserve.engine.scheduler import ScheduledBatch, Scheduler
from nanoserve.engine.sequence import SequenceStatus

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


class PrefillFirstScheduler(Scheduler):
    """Prefill-only steps while any prompt is waiting or half done; decode-only steps otherwise."""

    def _is_prefill(self, seq) -> bool:
        """Prompt (or recompute) tokens left: more than one, or the prompt's own last token."""
        return self._remaining(seq) > 1 or seq.num_output_tokens == 0

    def schedule(self) -> ScheduledBatch:
        if self.waiting or any(self._is_prefill(s) for s in self.running):
            batch = self._prefill_only()
            if not batch.is_empty:
                return batch
        return self._decode_only()

    def _prefill_only(self) -> ScheduledBatch:
        batch, budget = ScheduledBatch(), self.config.max_num_batched_tokens
        for seq in self.running:
            if self._is_prefill(seq) and budget > 0:
                n = min(self._remaining(seq), budget)
                need = self.block_manager.blocks_needed(seq.block_table, seq.num_computed_tokens + n)
                if need > self.block_manager.num_free_blocks:
                    break
                self._take(batch, seq, n, need)
                budget -= n
        self._admit(batch, budget)
        return batch

    def _decode_only(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        for seq in list(self.running):
            if seq.status is not SequenceStatus.RUNNING or self._is_prefill(seq):
                continue
            need = self.block_manager.blocks_needed(seq.block_table, seq.num_computed_tokens + 1)
            while need > self.block_manager.num_free_blocks:
                victim = self.running[-1]
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self._take(batch, seq, 1, need)
        return batch


class MixedScheduler(Scheduler):
    """The typical mistake: admitting new prompts first but keeping the running decodes in the same step."""


def recompute_tokens(records, seqs) -> int:
    """Prefill tokens computed beyond the prompts: recompute after preemption."""
    return sum(r.num_prefill_tokens for r in records) - sum(s.num_prompt_tokens for s in seqs)


def recompute_tokens_wrong(records, seqs) -> int:
    """Counts preempted sequences, not the tokens they had to compute again."""
    return sum(len(r.preempted) for r in records)


def _step(self, reserve_decodes: bool, admit_first: bool = False) -> ScheduledBatch:
    """One step: running sequences first (decodes before chunks), then admissions."""
    batch, budget = ScheduledBatch(), self.config.max_num_batched_tokens
    running = list(self.running)
    if admit_first:
        self._admit(batch, budget)
        budget -= batch.num_batched_tokens
    pending = sum(self._remaining(s) == 1 for s in self.running) if reserve_decodes else 0
    for seq in running:
        if seq.status is not SequenceStatus.RUNNING:
            continue
        remaining = self._remaining(seq)
        if reserve_decodes and remaining == 1:
            pending -= 1
        n = min(1, budget) if remaining == 1 else min(remaining, budget - pending)  # a decode, or a chunk
        if n <= 0:
            continue
        need = self.block_manager.blocks_needed(seq.block_table, seq.num_computed_tokens + n)
        while need > self.block_manager.num_free_blocks and seq.status is SequenceStatus.RUNNING:
            victim = self.running[-1]  # the newest
            if reserve_decodes and victim is not seq and self._remaining(victim) == 1:
                pending -= 1
            self._preempt(victim)
            batch.preempted.append(victim)
        if seq.status is not SequenceStatus.RUNNING:
            continue
        self._take(batch, seq, n, need)
        budget -= n
    if not batch.preempted and not admit_first:
        self._admit(batch, budget)
    return batch


class StepScheduler(Scheduler):
    """The chapter's step, rewritten from its rules with Scheduler's helpers."""

    def schedule(self) -> ScheduledBatch:
        return _step(self, reserve_decodes=True)


class AdmitFirstScheduler(StepScheduler):
    """Admits new prompts before the running sequences: a long prompt starves every decode of its step."""

    def schedule(self) -> ScheduledBatch:
        return _step(self, reserve_decodes=True, admit_first=True)


SOLUTIONS = {"05.6": StepScheduler, "05.1": PrefillFirstScheduler, "05.4": recompute_tokens}
WRONG = {"05.6": AdmitFirstScheduler, "05.1": MixedScheduler, "05.4": recompute_tokens_wrong}

EXPLANATIONS = {
    "05.1": (
        "Measured with section 6's policy_latency on the busy workload (roomy pool):\n"
        "  policy                 steps  mean steps to 1st token  longest gap between tokens\n"
        "  mixed, decode first       86                      9.2                           1\n"
        "  prefill first            104                     15.2                           3\n"
        "Prefill-first is worse on all three. A prefill-only step leaves budget unused when the waiting\n"
        "prompts are short, and the decodes it holds back need steps of their own, so the workload takes\n"
        "more steps. The running requests finish later, so a new prompt waits longer for one of the\n"
        "max_num_seqs=8 running places, and its first token comes later too. And a decoding request\n"
        "waits through every prefill step, so its stream stalls for up to 3 steps."),
    "05.2": (
        "A watermark makes admission leave `w` blocks free: in `_admit`, refuse when\n"
        "`need > num_free_blocks - watermark`. In the tight pool the running decodes then find a free\n"
        "block more often when they cross a block boundary, so preemptions fall as `w` grows, down to\n"
        "none once `w` covers one block per running sequence. The cost is admission: fewer sequences\n"
        "run at once, so steps are smaller and the whole workload takes more steps; a watermark that\n"
        "is too large idles memory that could have held another request."),
    "05.3": (
        "With the oldest as victim, the request that has waited longest loses its KV first. Under\n"
        "steady pressure (a pool too small for all running sequences, new arrivals every step) the\n"
        "oldest is readmitted at the front, grows again until the pool is tight, and is evicted again:\n"
        "it recomputes over and over and may never reach max_tokens. Newest-first cannot starve: the\n"
        "oldest running sequence is never the victim while a newer one runs, so it always makes\n"
        "progress and eventually finishes, freeing its blocks for the next oldest."),
    "05.5": (
        "Steps fall as the budget grows from 8 to 32 because prompts are cut into fewer chunks and more\n"
        "of them fit next to the decodes. Beyond that, the budget stops binding: a step is limited by\n"
        "max_num_seqs and by how much work has arrived, not by the token cap, so 64 takes about as many\n"
        "steps as 32. On a GPU the budget also bounds activation memory, which is why it is not infinite."),
}
