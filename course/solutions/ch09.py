"""Solutions to chapter 09's exercises (CUDA graphs)."""
import numpy as np
import torch

from nanoserve.attention.paged_decode import PagedDecode, pick_bucket, stage_tables
from nanoserve.engine.cuda_graphs import graph_buckets

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def worst_padding(buckets):
    """Try every batch size; the worst share of padding lanes."""
    return max((pick_bucket(n, buckets) - n) / pick_bucket(n, buckets) for n in range(1, max(buckets) + 1))


def worst_padding_at_bucket_edges(buckets):
    """A typical mistake: look only just above each bucket boundary, forgetting the smallest batch sizes."""
    return max(((b - a - 1) / b for a, b in zip(buckets, buckets[1:])), default=0.0)


def graphs_to_capture(max_num_seqs):
    """One forward graph per bucket; per bucket a greedy and a sampling head graph."""
    buckets = graph_buckets(max_num_seqs)
    return len(buckets), 2 * len(buckets)


def graphs_to_capture_one_head_each(max_num_seqs):
    """A typical mistake: one head graph per bucket, forgetting that greedy and sampling rows get one each."""
    buckets = graph_buckets(max_num_seqs)
    return len(buckets), len(buckets)


class MyPagedDecode(PagedDecode):
    """The decode bucket choice and staging, written out."""

    def bucket_for(self, step):
        return pick_bucket(step.num_tokens, self.buckets) if step.is_decode else None

    def stage(self, views, step):
        n = step.num_tokens
        views["context_lens"][:n] = step.context_lens.numpy()
        np.cumsum(views["context_lens"], out=views["cu_seqlens_k"][1:])
        stage_tables(views["block_tables"], step.block_tables.numpy())


class PaddingReadsNowhere(MyPagedDecode):
    """A typical mistake: padding lanes get the table entry -1, which the kernel would read out of bounds."""

    def stage(self, views, step):
        super().stage(views, step)
        views["block_tables"][step.num_tokens:] = -1


class DecodeGraph:
    """One decode bucket as a graph: static buffers at padding values, a warm-up run, the capture, then replays."""

    def __init__(self, decode, bucket, device, pool, cuda):
        self.ids = torch.zeros(bucket, dtype=torch.int64, device=device)
        self.positions = torch.zeros(bucket, dtype=torch.int64, device=device)
        self.slots = torch.full((bucket,), -1, dtype=torch.int64, device=device)  # padding writes nowhere
        decode(self.ids, self.positions, self.slots)  # warm-up: lazy set-up must not happen inside the capture
        cuda.synchronize()
        self.graph = cuda.CUDAGraph()
        with cuda.graph(self.graph, pool=pool):
            self.out = decode(self.ids, self.positions, self.slots)

    def replay(self, ids, positions, slots):
        n = len(ids)
        for static, value, pad in ((self.ids, ids, 0), (self.positions, positions, 0), (self.slots, slots, -1)):
            static[:n].copy_(value)
            static[n:] = pad
        self.graph.replay()
        return self.out[:n]


class StalePaddingGraph(DecodeGraph):
    """A typical mistake: the step's rows are copied in, but lanes past them keep what an earlier step left there."""

    def replay(self, ids, positions, slots):
        n = len(ids)
        self.ids[:n], self.positions[:n], self.slots[:n] = ids, positions, slots
        self.graph.replay()
        return self.out[:n]


SOLUTIONS = {"09.1": worst_padding, "09.2": graphs_to_capture, "09.6": MyPagedDecode, "09.7": DecodeGraph}
WRONG = {"09.1": worst_padding_at_bucket_edges, "09.2": graphs_to_capture_one_head_each, "09.6": PaddingReadsNowhere,
         "09.7": StalePaddingGraph}

EXPLANATIONS = {
    "09.3": """Each graph keeps the memory its intermediate tensors used, reserved in its pool. With one shared
pool captured largest first, every smaller bucket's intermediates fit into blocks the largest one already
reserved (only one graph runs at a time, so they may overlap), and all buckets cost about what the largest
costs alone. Smallest first with a pool each, every bucket reserves its own memory: the sum over buckets,
for 20 buckets up to 256 many times the shared figure, and all of it comes out of the KV cache. Captured
smallest first into one shared pool, the pool has to grow at every larger bucket and fragments.""",
    "09.4": """A graph records pointers, not tensors: every kernel that reads or writes the KV cache was captured with
the cache's device addresses. Captured before the cache exists, there would be no addresses to record (the
profile run uses a throwaway one-block cache). If the engine re-allocated the cache later, the graphs would
go on reading and writing the old addresses: freed memory that may now hold something else, so garbage
attention and silent corruption rather than an error. Re-allocating therefore means capturing again.""",
    "09.5": """flash-attn's decode kernel reads the K/V blocks of every lane's context from the block table before it
knows that the lane's output will be dropped; a padding lane has context length 1, so it reads the first
entry of its block table. With -1 there, the kernel would compute an address before the start of the cache
and read out of bounds (an illegal memory access that kills the CUDA context). Block 0 always exists, so
reading it is harmless; writing is what must not happen, and slot -1 prevents that.""",
}
