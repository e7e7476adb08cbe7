"""Solutions to chapter 09's exercises (CUDA graphs, fused kernels)."""
import torch

from nanoserve.attention.paged_decode import pick_bucket as bucket_for

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def worst_padding(buckets):
    """Try every batch size; the worst share of padding lanes."""
    return max((bucket_for(n, buckets) - n) / bucket_for(n, buckets) for n in range(1, max(buckets) + 1))


def worst_padding_at_bucket_edges(buckets):
    """A typical mistake: look only just above each bucket boundary, forgetting the smallest batch sizes."""
    return max(((b - a - 1) / b for a, b in zip(buckets, buckets[1:])), default=0.0)


def race_sample(logits, temperatures, noise):
    """argmax(softmax(l / T) / E); greedy rows take the argmax of the logits."""
    greedy = temperatures == 0
    probs = (logits / torch.where(greedy, 1.0, temperatures)[:, None]).softmax(dim=-1)
    return torch.where(greedy, logits.argmax(dim=-1), (probs / noise).argmax(dim=-1))


def race_sample_multiplied(logits, temperatures, noise):
    """A typical mistake: multiply by the noise, which favours unlikely tokens."""
    greedy = temperatures == 0
    probs = (logits / torch.where(greedy, 1.0, temperatures)[:, None]).softmax(dim=-1)
    return torch.where(greedy, logits.argmax(dim=-1), (probs * noise).argmax(dim=-1))


SOLUTIONS = {"09.1": worst_padding, "09.2": race_sample}
WRONG = {"09.1": worst_padding_at_bucket_edges, "09.2": race_sample_multiplied}

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
    "09.6": """Per layer the fused model runs 4 GEMMs, 2 RMSNorms on the residual stream, q_norm, k_norm, rotary,
SiLU-and-mul, plus the KV store and attention: 12 kernels. Folding q_norm, k_norm and rotary into one leaves
10. The combined kernel must know, per token, its position (to pick the cos/sin row), both gains (q_norm's and
k_norm's weights), epsilon, the head counts of q and k and their strides in the QKV output, and it must
normalise a whole head before rotating it: the rotation mixes the two halves of a head, so the RMS of the full
head has to be known first. One program per (token, head) that loads the head, normalises, rotates and
stores does it.""",
}
