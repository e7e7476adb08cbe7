"""Solutions to chapter 08's exercises (flash attention)."""
import torch

from course.tiling import tiles_visited

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def merge_partials(parts):
    """Rescale every partial to the common maximum, then add and normalise once."""
    m = torch.stack([p[0] for p in parts]).amax(0)
    l = sum(pl * torch.exp(pm - m) for pm, pl, _ in parts)
    acc = sum(pa * torch.exp(pm - m) for pm, _, pa in parts)
    return acc / l


def merge_partials_without_rescaling(parts):
    """A typical mistake: add the partial sums as if every split had the same maximum."""
    return sum(p[2] for p in parts) / sum(p[1] for p in parts)


def kv_bytes_read(num_tokens, q_block, k_block, kv_bytes_per_token):
    """Sum, over the tiles a causal kernel visits, of the key tokens each reads."""
    grid = tiles_visited(num_tokens, num_tokens, q_block, k_block)
    tokens = sum(int(grid[:, j].sum()) * (min((j + 1) * k_block, num_tokens) - j * k_block)
                 for j in range(grid.shape[1]))
    return tokens * kv_bytes_per_token


def kv_bytes_read_dense(num_tokens, q_block, k_block, kv_bytes_per_token):
    """A typical mistake: every query tile reads every key (no causal skipping)."""
    return -(-num_tokens // q_block) * num_tokens * kv_bytes_per_token


SOLUTIONS = {"08.1": merge_partials, "08.2": kv_bytes_read}
WRONG = {"08.1": merge_partials_without_rescaling, "08.2": kv_bytes_read_dense}

EXPLANATIONS = {
    "08.3": """An H200: about 990 TFLOP/s dense bf16 and 4.8 TB/s, so the ridge point is ~206 FLOPs per byte.
Causal prefill attention of one 2048-token prompt, per layer, Qwen3-0.6B shape (16 query heads, 8 KV heads,
head dim 128): QK^T and PV are each 2 * 16 * 128 * 2048^2 / 2 FLOPs with the causal half skipped, about
8.6 GFLOPs in all. A flash kernel reads q (2048 * 16 * 128 * 2 bytes), K and V (2 * 2048 * 8 * 128 * 2
bytes) and writes the output (as large as q): about 25 MB. That is ~340 FLOPs per byte, above the ridge:
prefill attention is compute-bound, decode attention (2 FLOPs per byte) is memory-bound. With larger query
tiles the K/V re-reads shrink further (exercise 08.2), so the kernel stays on the compute side.""",
    "08.4": """To take the dense call the backend must know that no sequence in the step has cached tokens, i.e.
that cu_seqlens_k equals cu_seqlens_q. Those are device tensors, so finding out means reading them back:
a host synchronisation every step, which stalls the host until the GPU has caught up and stops it from
queueing the next work. The scheduler does know it on the host, so it could be passed down as a flag,
but every flag is another shape the step can take: a CUDA graph (chapter 09) records one fixed sequence
of kernels, so a dense and a paged variant would double the graphs to capture and the memory they hold.
Since the paged call is as fast as the dense one on the H200 (0.12 vs 0.14 ms for 4,072 tokens), one
path for everything is the simpler and cheaper choice.""",
}
