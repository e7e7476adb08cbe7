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


SOLUTIONS = {"12.1": lanes_and_pieces, "12.3": empty_blocks}
WRONG = {"12.1": lanes_and_pieces_floor, "12.3": empty_blocks_one_tile_each}

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
