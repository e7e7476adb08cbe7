"""Checkers for chapter 06's exercises (the sampler)."""
import torch

from nanoserve.sampler import _filter_mask

__all__ = ["CHECKS"]


def check_top_k_removed(top_k_removed) -> str:
    """06.1: the top-k mask from torch.topk equals the sampler's sort-based one."""
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))  # continuous: no ties
    for k in (1, 3, 40, 100):
        want = _filter_mask(logits, torch.full((6,), min(k, 40)), torch.ones(6), torch.zeros(6), True, False)
        try:
            got = top_k_removed(logits, k)
        except NotImplementedError:
            raise
        except RuntimeError as err:
            raise AssertionError(f"hint: top_k_removed(logits, {k}) failed ({err}); a k beyond the "
                                 "vocabulary keeps every token") from None
        assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.shape == logits.shape, (
            "hint: return a bool tensor shaped like the logits, True where a token is removed")
        assert torch.equal(got, want), (f"hint: with k={k} your mask removes {int(got.sum())} tokens, "
                                        f"the sampler's removes {int(want.sum())}: keep exactly the k largest")
    return "top-k needs the k-th largest value per row, not a full sort"


CHECKS = {"06.1": check_top_k_removed}
