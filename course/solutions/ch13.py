"""Solutions to chapter 13's exercises (cascade attention)."""
__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def merge(out_a, lse_a, out_b, lse_b):
    """Each half weighted by its share of the combined softmax denominator."""
    import torch

    lse = torch.logaddexp(lse_a, lse_b)
    return out_a * (lse_a - lse).exp().unsqueeze(-1) + out_b * (lse_b - lse).exp().unsqueeze(-1)


def merge_by_average(out_a, lse_a, out_b, lse_b):
    """A typical mistake: averaging the two halves, as if both had the same number (and size) of scores."""
    return (out_a + out_b) / 2



def predicted_reads(context_lens, shared):
    """Plain decode reads every sequence's whole context; the cascade reads the prefix once, then each suffix."""
    return sum(context_lens), shared + sum(n - shared for n in context_lens)


def predicted_reads_no_prefix(context_lens, shared):
    """A typical mistake: forgetting that the cascade still reads the shared prefix once."""
    return sum(context_lens), sum(n - shared for n in context_lens)


def prefix_weight(lse_a, lse_b, members):
    """exp(a - logaddexp(a, b)) = 1 / (1 + exp(b - a)) = sigmoid(a - b); a non-member's a is -inf, so its weight is 0."""
    import torch

    return torch.sigmoid(torch.where(members[:, None] != 0, lse_a, float("-inf")) - lse_b)


def prefix_weight_swapped(lse_a, lse_b, members):
    """A typical mistake: sigmoid(lse_b - lse_a), which is the suffix's weight."""
    import torch

    return torch.sigmoid(lse_b - lse_a) * (members[:, None] != 0)


SOLUTIONS = {"13.1": merge, "13.2": predicted_reads, "13.4": prefix_weight}
WRONG = {"13.1": merge_by_average, "13.2": predicted_reads_no_prefix, "13.4": prefix_weight_swapped}

EXPLANATIONS = {
    "13.3": """A 3-block prefix is 48 tokens, so (members - 1) x 48 >= 32,768 needs members - 1 >= 683, i.e. 684
members: more than the default max_num_seqs of 256, so a prefix that short never takes the cascade, and rightly,
since the merge's extra kernels would cost more than 48 tokens of reads save. The count is members - 1 because
the cascade does not skip the prefix: it still reads it once (once per tile of 64 queries on the GPU), so the
reads saved are the other members' copies. A better bar would weigh what a step really pays: the saved bytes
(prefix tokens x members x 112 KiB per token on Qwen3-0.6B, minus the per-tile re-reads) against the merge's
fixed cost, measured per bucket at start-up by timing the cascade graph against the plain decode graph on a
synthetic shared prefix.""",
}
