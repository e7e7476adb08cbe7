"""Checkers for chapter 12's exercises (mixed-step graphs)."""
from course.solutions.ch12 import lanes_and_pieces as _lanes_and_pieces  # the reference the answer is compared with

__all__ = ["CHECKS"]


def check_lanes_and_pieces(lanes_and_pieces) -> str:
    """12.1: decode lanes and varlen pieces of a step, as plan_mixed_layout cuts it."""
    cases = [([1], 128), ([300], 128), ([1, 1, 5], 128), ([128, 129, 1, 2], 128), ([236, 1, 5], 64), ([1000], 512)]
    for case in cases:
        want, got = _lanes_and_pieces(*case), lanes_and_pieces(list(case[0]), case[1])
        if tuple(got) != want:
            raise AssertionError(f"lanes_and_pieces{case} = {got!r}, expected {want}: a one-token chunk is a lane, "
                                 "a longer chunk is cut into pieces of at most piece_len queries (the last one "
                                 "may be shorter)")
    return "the same counts plan_mixed_layout produces"


TILE = 64  # query rows per thread block of flash-attn 2's varlen kernel when it is given a block table (split-KV)


def counted_empty_blocks(q_lens, bucket, slots, heads, tile=TILE) -> int:
    """Walk the naive grid (row tile, sequence slot, head) and count the blocks whose tile holds no query row."""
    lens = list(q_lens) + [0] * (slots - len(q_lens))  # padding slots have no rows
    empty = 0
    for row_tile in range(-(-bucket // tile)):
        for slot in range(slots):
            for _ in range(heads):
                empty += row_tile * tile >= lens[slot]
    return empty


def check_empty_blocks(empty_blocks) -> str:
    """12.3: the reader's count of the naive grid's empty thread blocks against a block-by-block walk."""
    cases = [([1], 128, 4, 2), ([300], 512, 8, 2), ([1, 1, 5], 1024, 16, 4), ([236, 1, 5], 512, 256, 16),
             ([129, 128, 2000], 2048, 32, 1)]
    for case in cases:
        got, want = empty_blocks(list(case[0]), *case[1:]), counted_empty_blocks(*case)
        if got != want:
            raise AssertionError(f"empty_blocks{case} = {got!r}, but walking the grid finds a different count: "
                                 f"a sequence of q rows has work in ceil(q / {TILE}) row tiles, for every head")
    return "your count matches a walk over the whole grid"


CHECKS = {"12.1": check_lanes_and_pieces, "12.3": check_empty_blocks}
