"""Solutions to chapter 11's exercises (async scheduling, mixed-step graphs)."""
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


def lanes_and_pieces(q_lens, piece_len):
    """One-query chunks are lanes; every longer chunk needs ceil(length / piece_len) pieces."""
    lanes = sum(1 for n in q_lens if n == 1)
    pieces = sum(-(-n // piece_len) for n in q_lens if n > 1)
    return lanes, pieces


def lanes_and_pieces_floor(q_lens, piece_len):
    """A typical mistake: rounding the pieces down, which drops a chunk's last, shorter piece."""
    return sum(1 for n in q_lens if n == 1), sum(max(1, n // piece_len) for n in q_lens if n > 1)


def merge(out_a, lse_a, out_b, lse_b):
    """Each half weighted by its share of the combined softmax denominator."""
    import torch

    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * (lse_a - lse).exp().unsqueeze(-1) + out_b * (lse_b - lse).exp().unsqueeze(-1)


def merge_by_average(out_a, lse_a, out_b, lse_b):
    """A typical mistake: averaging the two halves, as if both had the same number (and size) of scores."""
    return (out_a + out_b) / 2


SOLUTIONS = {"11.1": token_rows, "11.2": wasted_lanes, "11.4": lanes_and_pieces, "11.6": merge}
WRONG = {"11.1": token_rows_at_chunk_start, "11.2": wasted_lanes_every_stop, "11.4": lanes_and_pieces_floor,
         "11.6": merge_by_average}

EXPLANATIONS = {
    "11.3": """Two steps ahead, step n+2 is launched while steps n and n+1 are both in flight. A decoding sequence then
has two pending tokens: `num_pending_tokens` counts them, and the scheduler needs nothing else. The input of step
n+2 is step n+1's token, which step n+1's sampler writes into the sequence's table slot before step n+2 reads it
(stream order), so the token table still works as it is. What breaks is the host side: the core must keep two
steps in flight and commit them in order, the outputs come two calls late, and a sequence stopped by step n's
eos has two lanes of wasted work, not one. The pinned host copies must not be shared between the two steps in
flight. It pays off only when one step's host work is longer than the GPU's step, e.g. a very fast GPU with a
small model and a slow host: with host < GPU time, one step ahead already hides all of it.""",
    "11.5": """Between 512 and 8,192 rows the buckets grow by x1.5 and x4/3 in turn, so a step pads to at most 1.5 times
its rows (513 rows replay the 768-row graph) and on average much less; 14 graphs cover a budget of 8,192.
Powers of two alone would need 10 graphs but pad up to 2x (4,097 rows to 8,192), and the padded rows go
through every GEMM and the MLP: at thousands of rows the GPU time of a step is proportional to its rows,
so the long steps, where padding costs the most, want the finest grid. Each extra bucket costs one warm-up
forward and one capture at start-up (tens of milliseconds each on a slow host) and a little pool memory,
since all graphs share one pool and only the largest sets its size. A grid of multiples of 512 would pad
less than 1.5x everywhere above 1,024 rows but needs 16 graphs above 512; the geometric grid is the usual
compromise (vLLM's capture sizes grow the same way).""",
}
