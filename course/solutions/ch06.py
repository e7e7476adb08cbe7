"""Solutions to chapter 06's exercises, a typical mistake the checker rejects, and written answers."""
import torch

__all__ = ["SOLUTIONS", "WRONG", "EXPLANATIONS"]


def top_k_removed(logits: torch.Tensor, k: int) -> torch.Tensor:
    """True where a token is outside its row's k largest logits (no full sort)."""
    k = min(k, logits.shape[-1])
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits < kth


def top_k_removed_wrong(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Off by one: `<=` also removes the k-th token itself."""
    k = min(k, logits.shape[-1])
    return logits <= logits.topk(k, dim=-1).values[:, -1:]


SOLUTIONS = {"06.1": top_k_removed}
WRONG = {"06.1": top_k_removed_wrong}

EXPLANATIONS = {
    "06.2": (
        "top_p=0.5 keeps 1 token of the confident row (its favourite alone holds more than half the\n"
        "mass) and 3 of the unsure row; top_p=0.99 keeps 6 and all 8. The unsure row's count moves\n"
        "more at every step of top_p: its probability is spread thinly, so each extra share of mass\n"
        "needs several more tokens, while the confident row reaches most of its mass with its first\n"
        "few. A fixed mass therefore means few tokens when the model is sure and many when it is not,\n"
        "which is what top-k (a fixed count) cannot do."),
    "06.3": (
        "Give every request a seed when it arrives: derive_seed(engine_seed, hash(request_id)), then\n"
        "treat it like a user seed (its own torch.Generator). Its tokens then depend only on its own\n"
        "logits and stream, not on its batch mates. The cost: every row becomes a seeded row, so the\n"
        "sampler redraws each row's noise from its own generator (one small kernel per row instead of\n"
        "one batched draw), and no row is 'plain' any more, so a runner's fast path (sampling inside\n"
        "a CUDA graph, chapter 09) would have to take per-row generator states as inputs."),
}
