"""Solutions to chapter 10's exercises (kernel fusion)."""
from nanoserve.kernels.fused import _next_pow2

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def kernels_after_fusion_on_cpu():
    """On a CPU the fused modules run their parent's torch code: the count does not move."""
    return 52


def kernels_after_fusion_as_on_the_gpu():
    """A typical mistake: the GPU's count (ten launches) for a layer that ran on the CPU."""
    return 10


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
    "10.3": """Per layer the fused model runs 4 GEMMs, 2 RMSNorms on the residual stream, q_norm, k_norm, rotary,
SiLU-and-mul, plus the KV store and attention: 12 kernels. Folding q_norm, k_norm and rotary into one leaves
10. The combined kernel must know, per token, its position (to pick the cos/sin row), both gains (q_norm's and
k_norm's weights), epsilon, the head counts of q and k and their strides in the QKV output, and it must
normalise a whole head before rotating it: the rotation mixes the two halves of a head, so the RMS of the full
head has to be known first. One program per (token, head) that loads the head, normalises, rotates and
stores does it.""",
}
