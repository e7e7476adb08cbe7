"""Solutions to chapter 11's exercises (the host one step ahead)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def token_rows(num_new_tokens, slots, reaches_newest):
    """Walk the chunks with a running offset; a chunk that ends at its sequence's newest token and whose
    sequence holds a slot reads that last row from the table."""
    rows, offset = [], 0
    for n, slot, newest in zip(num_new_tokens, slots, reaches_newest):
        rows += [-1] * n
        offset += n
        if newest and slot >= 0:
            rows[offset - 1] = slot
    return rows


def token_rows_at_chunk_start(num_new_tokens, slots, reaches_newest):
    """A typical mistake: mark the first row of each chunk, which is the newest token only for a decode."""
    rows, offset = [], 0
    for n, slot, newest in zip(num_new_tokens, slots, reaches_newest):
        rows += [-1] * n
        if newest and slot >= 0:
            rows[offset] = slot
        offset += n
    return rows


def wasted_lanes(stop_steps, max_tokens):
    """An eos found one step late costs one lane, unless the length limit ended the sequence there anyway."""
    return sum(1 for s, m in zip(stop_steps, max_tokens) if s is not None and s < m)


def wasted_lanes_every_stop(stop_steps, max_tokens):
    """A typical mistake: also counting an eos on the last allowed token."""
    return sum(1 for s in stop_steps if s is not None)


def predict_calls(arrivals, max_tokens, async_scheduling):
    """Request i's last token is sampled by the step launched at call arrivals[i] + max_tokens[i]; one step
    ahead, that step's output comes back one call later."""
    return max(a + m for a, m in zip(arrivals, max_tokens)) + (1 if async_scheduling else 0)


def predict_calls_same_for_both(arrivals, max_tokens, async_scheduling):
    """A typical mistake: forgetting that the one-step-ahead core returns every step's output a call late."""
    return max(a + m for a, m in zip(arrivals, max_tokens))


def table_input_ids(input_ids, table):
    """Read the table at every row (row 0 for the staged ids, which are not references), keep it where the row
    stages a reference -1 - row."""
    import torch

    return torch.where(input_ids >= 0, input_ids, table[(-1 - input_ids).clamp(min=0)])


def table_input_ids_masked(input_ids, table):
    """A typical mistake: right ids, but a boolean mask needs the host to count the rows (no graph, a stall)."""
    out = input_ids.clone()
    refs = input_ids < 0
    out[refs] = table[-1 - input_ids[refs]]
    return out


SOLUTIONS = {"11.1": token_rows, "11.2": wasted_lanes, "11.4": predict_calls, "11.5": table_input_ids}
WRONG = {"11.1": token_rows_at_chunk_start, "11.2": wasted_lanes_every_stop, "11.4": predict_calls_same_for_both,
         "11.5": table_input_ids_masked}

EXPLANATIONS = {
    "11.3": """Two steps ahead, step n+2 is launched while steps n and n+1 are both in flight. A decoding sequence then
has two pending tokens: the scheduler's `pending` counts them, and `_remaining` needs nothing else. The input of
step n+2 is step n+1's token, copied into the table before step n+2 reads it (stream order), but the table holds one
step's tokens, in that step's row order: a sequence whose chunk reaches back over two pending tokens (a recompute,
a chunk) would need both, so the table must keep two steps (two row maps, or a slot per sequence). The host side
breaks too: the core must keep two
steps in flight and commit them in order, the outputs come two calls late, and a sequence stopped by step n's
eos has two lanes of wasted work, not one. The pinned host copies must not be shared between the two steps in
flight. It pays off only when one step's host work is longer than the GPU's step, e.g. a very fast GPU with a
small model and a slow host: with host < GPU time, one step ahead already hides all of it.""",
}
