"""Solutions to chapter 07's exercises, typical mistakes the checkers reject, and written answers."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def flat_step_layout(token_chunks: list, starts: list, block_tables: list, block_size: int) -> tuple:
    """(input_ids, positions, slot_mapping) of one step, by the formulas, one token at a time."""
    ids, positions, slots = [], [], []
    for chunk, start, table in zip(token_chunks, starts, block_tables):
        ids.extend(chunk)
        for p in range(start, start + len(chunk)):
            positions.append(p)
            slots.append(table[p // block_size] * block_size + p % block_size)
    return ids, positions, slots


def flat_step_layout_wrong(token_chunks: list, starts: list, block_tables: list, block_size: int) -> tuple:
    """Forgets the cached tokens: every chunk's positions start at 0."""
    return flat_step_layout(token_chunks, [0] * len(starts), block_tables, block_size)


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


SOLUTIONS = {"07.1": flat_step_layout, "07.2": LoggingExecutor}
WRONG = {"07.1": flat_step_layout_wrong, "07.2": LoggingExecutorWrong}

EXPLANATIONS = {
    "07.3": (
        "The scheduler runs the 30 decodes first, so each step leaves 542 - 30 = 512 tokens of budget for\n"
        "the prompt: its prefill takes 4 steps (512, 512, 512, then 464 tokens). The first three chunks\n"
        "do not reach the end of the prompt, so they sample nothing: those steps compute 30 rows of\n"
        "logits, the decodes'. The last chunk reaches the end and samples, so that step computes 31.\n"
        "Logits for every token instead would be 542 rows x 151,936 x 4 bytes, about 0.33 GB of float32\n"
        "per step, against about 18 MB for 30 rows."),
}
