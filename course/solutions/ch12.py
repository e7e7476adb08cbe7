"""Solutions to chapter 12's exercises (mixed-step graphs)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def lanes_and_pieces(q_lens, piece_len):
    """One-query chunks are lanes; every longer chunk needs ceil(length / piece_len) pieces."""
    lanes = sum(1 for n in q_lens if n == 1)
    pieces = sum(-(-n // piece_len) for n in q_lens if n > 1)
    return lanes, pieces


def lanes_and_pieces_floor(q_lens, piece_len):
    """A typical mistake: rounding the pieces down, which drops a chunk's last, shorter piece."""
    return sum(1 for n in q_lens if n == 1), sum(max(1, n // piece_len) for n in q_lens if n > 1)


TILE = 64  # query rows per thread block of flash-attn 2's paged varlen (split-KV) kernel


def empty_blocks(q_lens, bucket, slots, heads):
    """Every block of the grid minus those with work: ceil(q / 64) row tiles per sequence, per head."""
    total = -(-bucket // TILE) * slots * heads
    return total - heads * sum(-(-q // TILE) for q in q_lens)


def empty_blocks_one_tile_each(q_lens, bucket, slots, heads):
    """A typical mistake: giving every sequence one row tile of work, however long its chunk."""
    return -(-bucket // TILE) * slots * heads - heads * len(q_lens)


def plan_mixed_layout(step, piece_len=128):
    """Walk the sequences twice: one-query chunks become lanes, then every longer chunk is cut into pieces."""
    import numpy as np

    from nanoserve.attention.mixed_step import MixedLayout

    cu, context = step.cu_seqlens_q.tolist(), step.context_lens.tolist()
    lanes = [b for b in range(len(context)) if cu[b + 1] - cu[b] == 1]
    order = [cu[b] for b in lanes]
    piece_seqs, piece_starts, piece_keys = [], [], []
    for b in range(len(context)):
        length = cu[b + 1] - cu[b]
        if length == 1:
            continue
        cached = context[b] - length  # keys already in the cache before this chunk
        for first in range(0, length, piece_len):
            rows = min(piece_len, length - first)
            piece_seqs.append(b)
            piece_starts.append(len(order) + first)
            piece_keys.append(cached + first + rows)
        order += range(cu[b], cu[b + 1])
    as_array = lambda xs: np.array(xs, dtype=np.int64)
    return MixedLayout(order=as_array(order), lane_seqs=as_array(lanes), piece_seqs=as_array(piece_seqs),
                       piece_starts=as_array(piece_starts + [len(order)]), piece_keys=as_array(piece_keys))


def plan_mixed_layout_without_cache(step, piece_len=128):
    """A typical mistake: a piece attends only the chunk's own keys, forgetting the cached prefix before it."""
    layout = plan_mixed_layout(step, piece_len)
    cu, context = step.cu_seqlens_q.numpy(), step.context_lens.numpy()
    cached = (context - (cu[1:] - cu[:-1]))[layout.piece_seqs]
    layout.piece_keys = layout.piece_keys - cached
    return layout


SOLUTIONS = {"12.1": lanes_and_pieces, "12.3": empty_blocks, "12.4": plan_mixed_layout}
WRONG = {"12.1": lanes_and_pieces_floor, "12.3": empty_blocks_one_tile_each, "12.4": plan_mixed_layout_without_cache}

EXPLANATIONS = {
    "12.2": """Between 512 and 8,192 rows the buckets grow by x1.5 and x4/3 in turn, so a step pads to at most 1.5 times
its rows (513 rows replay the 768-row graph) and on average much less; 14 graphs cover a budget of 8,192.
Powers of two alone would need 10 graphs but pad up to 2x (4,097 rows to 8,192), and the padded rows go
through every GEMM and the MLP: at thousands of rows the GPU time of a step is proportional to its rows,
so the long steps, where padding costs the most, want the finest grid. Each extra bucket costs one warm-up
forward and one capture at start-up (tens of milliseconds each on a slow host) and a little pool memory,
since all graphs share one pool and only the largest sets its size. A grid of multiples of 512 would pad
less than 1.5x everywhere above 1,024 rows but needs 16 graphs above 512; the geometric grid is the usual
compromise (vLLM's capture sizes grow the same way).""",
}
