"""Checkers for chapter 19's exercises (Hopper attention)."""
__all__ = ["CHECKS"]


def check_visible_keys(my_visible_keys) -> str:
    """19.1: the keys each new query sees under the causal mask aligned to the end of the sequence's keys."""
    import torch

    from nanoserve.attention.cascade import attend_with_lse

    for n_queries, n_keys in ((1, 1), (1, 300), (4, 4), (5, 37), (16, 16), (3, 64)):
        got = list(my_visible_keys(n_queries, n_keys))
        if len(got) != n_queries:
            raise AssertionError(f"{n_queries} queries need {n_queries} counts, got {len(got)}")
        g = torch.Generator().manual_seed(n_keys)
        q, k, v = (torch.randn(shape, generator=g) for shape in ((n_queries, 2, 8), (n_keys, 1, 8), (n_keys, 1, 8)))
        for i, visible in enumerate(got):
            if not isinstance(visible, int) or not 1 <= visible <= n_keys:
                raise AssertionError(f"query {i} of {n_queries} over {n_keys} keys: {visible!r} is not a count "
                                     f"between 1 and {n_keys}")
            mine, _ = attend_with_lse(q[i:i + 1], k[:visible], v[:visible])
            position = n_keys - n_queries + i  # the query's own position in the sequence
            want, _ = attend_with_lse(q[i:i + 1], k[:position + 1], v[:position + 1])
            if not torch.allclose(mine, want, atol=1e-6):
                raise AssertionError(f"query {i} of {n_queries} new ones over {n_keys} keys sees {visible} keys: "
                                     f"the new queries are the last {n_queries} tokens, so it sits at position "
                                     f"{position} and sees every key up to and including its own")
    return "every new query sees the keys up to its own position, the cached ones included"


CHECKS = {"19.1": check_visible_keys}
