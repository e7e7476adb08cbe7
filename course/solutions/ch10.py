"""Solutions to chapter 10's exercises (kernel fusion)."""
from nanoserve.kernels.fused import _next_pow2

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def kernels_after_fusion_on_cpu():
    """On a CPU the fused modules run their parent's torch code: the count does not move."""
    return 52


def kernels_after_fusion_as_on_the_gpu():
    """A typical mistake: the GPU's count (eight launches) for a layer that ran on the CPU."""
    return 8


def rotary_launch(tokens, q_heads, k_heads, head_dim):
    """One program per token; the tile holds every q and k head, rounded up to a power of two."""
    block_h = _next_pow2(q_heads + k_heads)
    return tokens, block_h, block_h - q_heads - k_heads


def rotary_launch_query_heads_only(tokens, q_heads, k_heads, head_dim):
    """A typical mistake: size the tile for the query heads alone."""
    block_h = _next_pow2(q_heads)
    return tokens, block_h, block_h - q_heads


SOLUTIONS = {"10.1": kernels_after_fusion_on_cpu, "10.2": rotary_launch}
WRONG = {"10.1": kernels_after_fusion_as_on_the_gpu, "10.2": rotary_launch_query_heads_only}

EXPLANATIONS = {
    "10.3": """The store needs what the attention backend owns: the step's slot mapping (which cache slot each token's
key and value go to, with -1 for padding lanes that write nowhere), the cache tensors of this layer and their
layout (block size, and the shape the backend gave them), and v, which the rotary kernel never reads. The
model would have to hand the kernel the backend's cache and metadata, so the fused kernel would belong to the
attention backend, not to the model: the backend's `forward(q, k, v, layer, batch)`
would take un-rotated q and k plus the norms. That crosses chapter 08's seam (the model does not know the
cache); it saves one launch per layer (28 per step, about 1 us each in a graph), and each backend (torch,
flash, flash-attn-4) would need its own version.""",
}
