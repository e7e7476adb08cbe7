"""Solutions to chapter 09's exercises (async scheduling, prefill graphs)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def carry_rows(prev_seq_ids, batch_seq_ids, num_new_tokens):
    """Walk the next batch with a running token offset; look each sequence up among the rows in flight."""
    row_of = {s: i for i, s in enumerate(prev_seq_ids)}
    rows, src, offset = [], [], 0
    for s, n in zip(batch_seq_ids, num_new_tokens):
        if s in row_of:
            rows.append(offset)
            src.append(row_of[s])
        offset += n
    return rows, src


def carry_rows_by_sequence_index(prev_seq_ids, batch_seq_ids, num_new_tokens):
    """A typical mistake: the sequence's index in the batch, not its row in the flattened input ids."""
    row_of = {s: i for i, s in enumerate(prev_seq_ids)}
    pairs = [(b, row_of[s]) for b, s in enumerate(batch_seq_ids) if s in row_of]
    return [b for b, _ in pairs], [r for _, r in pairs]


def wasted_lanes(stop_steps, max_tokens):
    """An eos found one step late costs one lane, unless the length limit ended the sequence there anyway."""
    return sum(1 for s, m in zip(stop_steps, max_tokens) if s is not None and s < m)


def wasted_lanes_every_stop(stop_steps, max_tokens):
    """A typical mistake: also counting an eos on the last allowed token."""
    return sum(1 for s in stop_steps if s is not None)


SOLUTIONS = {"09.1": carry_rows, "09.2": wasted_lanes}
WRONG = {"09.1": carry_rows_by_sequence_index, "09.2": wasted_lanes_every_stop}

EXPLANATIONS = {
    "09.3": """Two steps ahead, step n+2 is launched while steps n and n+1 are both in flight. A decoding sequence then
holds two placeholders, so `_carry` must look up each placeholder's own step: the input of step n+2 is step
n+1's token, which lives in step n+1's output, and `last_tokens` may already have been overwritten by step
n+1's sampling graph before step n's copy was read, so each in-flight step needs its own output buffer (a ring
of two). `commit` assumes the placeholder is the last token; now it must replace the *first* of two, and a
sequence stopped by step n's eos has two lanes of wasted work, not one. The scheduler also counts on knowing
the length limit; that still works, placeholders count as tokens. It pays off only when one step's host work
is longer than the GPU's step, e.g. a very fast GPU with a small model and a slow host: with host < GPU time,
one step ahead already hides all of it.""",
    "09.4": """A 64-sequence, 2048-token graph replays any prefill or mixed step up to that size, including the first
step of a batch-32 benchmark, so the launch loop of a big first step disappears. It costs a capture and
pool memory proportional to 2048 rows of activations and a [64, vocab] logits buffer, and every replay
pays for the whole bucket: rows of no sequence still run through the GEMMs and the MLP, and flash-attn
launches thread blocks for all 64 sequence slots, most of which exit at once. The graph stops paying once
the GPU time of the padded work is larger than the launch time it saves: for long prefills the GPU is busy
for milliseconds anyway (the launches hide behind it), while padding 600 real tokens to 2048 triples the
GEMM work. Small buckets for short steps and eager for long ones is the balance chosen here.""",
}
