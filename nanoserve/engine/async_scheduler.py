"""The scheduler of the one-step-ahead loop: `update` split into `advance` and `commit`, a step apart (chapter 09)."""
from .scheduler import ScheduledBatch, Scheduler
from .sequence import SequenceStatus


class AsyncScheduler(Scheduler):
    """`advance` records a step's progress and counts its tokens as pending; `commit` writes them a step later."""

    def advance(self, batch: ScheduledBatch) -> list:
        """`update` without the tokens: each sampling sequence is one pending token longer, so the next
        `schedule()` already decodes it (its input id is read from the token table on the device)."""
        pending = []
        for seq, n, samples in zip(batch.seqs, batch.num_new_tokens, batch.samples):
            if seq.status is not SequenceStatus.RUNNING:  # finished (stop string, abort) since it was scheduled
                continue
            self._advance_one(seq, n)
            if samples:
                seq.num_pending_tokens += 1
                pending.append(seq)
        return pending

    def commit(self, seqs: list, tokens: list) -> list:
        """Append each sequence's sampled token in place of its pending one and apply the stop rules; return
        the sequences that finished (one that finished meanwhile, by abort or stop string, drops its token)."""
        if len(tokens) != len(seqs):
            raise ValueError(f"got {len(tokens)} sampled tokens for {len(seqs)} sequences")
        finished = []
        for seq, token in zip(seqs, tokens):
            if seq.status is SequenceStatus.FINISHED:
                continue
            if seq.num_pending_tokens < 1:
                raise RuntimeError(f"sequence {seq.seq_id!r} has no pending token to commit")
            seq.num_pending_tokens -= 1
            if self._commit_token(seq, token):
                finished.append(seq)
        return finished
