"""Solutions to chapter 07's exercises, typical mistakes the checkers reject, and written answers."""
import torch

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def top_k_removed(logits: torch.Tensor, k: int) -> torch.Tensor:
    """True where a token is outside its row's k largest logits (no full sort)."""
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits < kth


def top_k_removed_wrong(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Off by one: `<=` also removes the k-th token itself."""
    k = min(k, logits.shape[-1])
    return logits <= logits.topk(k, dim=-1).values[:, -1:]


class LoggingExecutor:
    """Any executor, plus a record of how many sequences each step ran."""

    def __init__(self, runner):
        self.runner = runner
        self.batch_sizes = []

    @property
    def num_eager_steps(self) -> int:
        return self.runner.num_eager_steps

    def profile_num_kv_blocks(self) -> int:
        return self.runner.profile_num_kv_blocks()

    def init_kv_cache(self, num_blocks: int) -> None:
        self.runner.init_kv_cache(num_blocks)

    def execute(self, batch, sampling):
        self.batch_sizes.append(len(batch))
        return self.runner.execute(batch, sampling)

    def shutdown(self) -> None:
        self.runner.shutdown()


class LoggingExecutorWrong(LoggingExecutor):
    """Records the sampling rows, not the scheduled sequences (a prompt chunk that does not sample is missed)."""

    def execute(self, batch, sampling):
        self.batch_sizes.append(sampling.num_rows)
        return self.runner.execute(batch, sampling)


SOLUTIONS = {"07.1": top_k_removed, "07.2": LoggingExecutor}
WRONG = {"07.1": top_k_removed_wrong, "07.2": LoggingExecutorWrong}

EXPLANATIONS = {
    "07.3": (
        "Keep a float table counts[max_num_seqs, V] on the device and give each sequence a row when it\n"
        "is admitted (zeroed). After each step, one `counts.index_put_((rows, tokens), ones,\n"
        "accumulate=True)` adds the sampled tokens; the penalties then read `counts[rows]` directly\n"
        "instead of rebuilding it from Python lists. Rebuilding costs O(output length) host work and a\n"
        "host-to-device copy per penalised row per step, so at batch 64 with 2,000-token outputs it\n"
        "grows with every token; the table costs V floats per running sequence (600 KiB at V=151,936)\n"
        "and one small scatter per step, whatever the length. Free or zero the row when the sequence\n"
        "finishes or is preempted (a recompute re-adds its tokens)."),
    "07.4": (
        "Give every request a seed when it arrives: derive_seed(engine_seed, hash(request_id)), then\n"
        "treat it like a user seed (its own torch.Generator). Its tokens then depend only on its own\n"
        "logits and stream, not on its batch mates. The cost: every row becomes a seeded row, so the\n"
        "sampler redraws each row's noise from its own generator (one small kernel per row instead of\n"
        "one batched draw), and no row is 'plain' any more, so a runner's fast path (sampling inside\n"
        "a CUDA graph, chapter 09) would have to take per-row generator states as inputs."),
    "07.5": (
        "Move `IncrementalDetokenizer.add` out of the step: the output processor puts (request id, new\n"
        "token ids) on a queue and a thread decodes and finds stop strings. Two things must stay\n"
        "ordered: a stop string found by the thread must still reach `core.finish` before the\n"
        "sequence's next token is wasted (at most one extra step if the thread lags), and deltas must\n"
        "be emitted in order. On a streaming run of 256 requests the step loses the per-token decode\n"
        "time (a few microseconds per token with DecodeStream), which matters only when the GPU step\n"
        "is short; measure both wall time and time between tokens."),
}
