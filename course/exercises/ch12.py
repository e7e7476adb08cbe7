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


def mixed_step_with_layout(plan_layout):
    """MixedStep whose plan lays each step out with `plan_layout(step)` instead of the chapter's function."""
    from nanoserve.attention.mixed_step import MixedStep
    from nanoserve.engine.graph_runner import GraphPlan

    class ReadersMixedStep(MixedStep):
        """Chapter 12's variant; the reader's layout decides lanes, pieces and the row order."""

        def plan(self, step):
            plan = super().plan(step)
            if plan is None:
                return None
            layout = plan_layout(step)
            return GraphPlan(plan.bucket, layout.order, layout)

    return ReadersMixedStep


def _layout_steps() -> list:
    """(what, step, piece_len) covering lanes, long chunks, prefix hits and chunks of exactly one piece."""
    from nanoserve.engine.model_runner import build_step_inputs

    ids = lambda n: [(7 * i) % 500 for i in range(n)]
    step = lambda chunks, starts, block_size=16: build_step_inputs(
        chunks, starts, [list(range(-(-(s + len(c)) // block_size))) for c, s in zip(chunks, starts)],
        [True] * len(chunks), block_size)
    return [("one fresh prompt of 300 tokens", step([ids(300)], [0]), 128),
            ("a prefix hit: 64 cached, 150 new", step([ids(150)], [64]), 128),
            ("a decode between two chunks", step([ids(236), [7], ids(5)], [64, 40, 0]), 128),
            ("three decodes and two chunks", step([[5], ids(130), [9], ids(2), [11]], [300, 0, 64, 0, 214]), 128),
            ("a chunk of exactly two pieces", step([ids(256), [3]], [32, 10]), 128),
            ("decodes only", step([[1], [2], [3]], [4, 9, 30]), 128),
            ("pieces of 64", step([ids(200), [4]], [17, 50]), 64)]


def _same_logits(variant_class) -> bool:
    """The tiny model's logits through a GraphRunner (uncaptured on a CPU) with `variant_class` equal the plain ones."""
    import torch

    from nanoserve.attention.mixed_step import token_buckets
    from nanoserve.engine.graph_runner import GraphRunner
    from nanoserve.engine.model_runner import build_step_inputs
    from nanoserve.llm import LLM

    from course.exercises.ch11 import _tiny_checkpoint

    runner = LLM(_tiny_checkpoint(), skip_tokenizer_init=True, device="cpu", dtype="float32", block_size=16,
                 max_model_len=512, max_num_seqs=8).engine.executor
    variant = variant_class(runner.backend, token_buckets(512), 8, 512, 16)
    graphs = GraphRunner(runner, [variant])
    graphs.init_kv_cache(runner.num_kv_blocks)
    ids = lambda n: [(11 * i) % 256 for i in range(n)]
    steps = [([ids(200)], [0], [list(range(13))]), ([[5], ids(40), [9]], [200, 0, 20], [list(range(13)), [20, 21, 22],
                                                                                        [30, 31]])]
    with torch.inference_mode():
        for chunks, starts, tables in steps:
            step = build_step_inputs(chunks, starts, tables, [True] * len(chunks), block_size=16)
            plain, replayed = runner.forward(step), graphs.forward(step)
            if graphs.plan(step) is None or not torch.allclose(replayed, plain, rtol=1e-4, atol=1e-4):
                return False
    return True


def check_mixed_layout(plan_mixed_layout) -> str:
    """12.4 (build it yourself): the lanes, pieces and row order of a step, field by field as the chapter lays them."""
    import numpy as np

    from nanoserve.attention.mixed_step import plan_mixed_layout as reference

    for what, step, piece_len in _layout_steps():
        want, got = reference(step, piece_len), plan_mixed_layout(step, piece_len)
        hints = {"order": "lanes' rows first, in sequence order, then every longer chunk's rows",
                 "lane_seqs": "the sequences with exactly one new token",
                 "piece_seqs": "one entry per piece, ceil(chunk length / piece_len) pieces per longer chunk",
                 "piece_starts": "the graph row of each piece's first query (after all lanes), then the row count",
                 "piece_keys": "the keys before the chunk (cached prefix) plus the chunk's queries up to the "
                               "piece's last one"}
        for field, hint in hints.items():
            mine = np.asarray(getattr(got, field, None))
            assert mine.shape == getattr(want, field).shape and np.array_equal(mine, getattr(want, field)), (
                f"hint: with {what} (piece_len {piece_len}) {field} is {mine.tolist()}, expected "
                f"{getattr(want, field).tolist()}: {hint}")
    assert _same_logits(mixed_step_with_layout(lambda step: plan_mixed_layout(step, 128))), \
        "hint: the tiny model's logits through your layout differ from the plain forward's"
    return "the tiny model gives the plain forward's logits through your layout; set USE_MY_MIXED_LAYOUT = True"


CHECKS = {"12.1": check_lanes_and_pieces, "12.3": check_empty_blocks, "12.4": check_mixed_layout}
