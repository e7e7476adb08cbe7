"""Checkers for chapter 11's exercises (async scheduling, mixed-step graphs)."""
from course.solutions.ch11 import token_rows as _token_rows  # the references the reader's answers are compared with
from course.solutions.ch11 import lanes_and_pieces as _lanes_and_pieces

__all__ = ["CHECKS"]


def check_token_rows(token_rows) -> str:
    """09.1: which rows of a step's flattened input ids read their id from the token table, and from which slot."""
    cases = [([1], [0], [True]), ([5, 1], [-1, 3], [True, True]), ([3, 1, 6], [2, 0, 4], [False, True, True]),
             ([4], [7], [True]), ([2, 2], [1, -1], [True, True])]
    for case in cases:
        want = _token_rows(*case)
        got = token_rows(*[list(x) for x in case])
        if list(got) != want:
            raise AssertionError(f"token_rows{case} = {got!r}, expected {want}: only the LAST row of a chunk is its "
                                 "sequence's newest token, and only a sequence that holds a slot (>= 0) reads it")
    return "the same token_rows prepare_step_inputs builds"


def _wasted(stop_steps, max_tokens):
    return sum(1 for s, m in zip(stop_steps, max_tokens) if s is not None and s < m)


def check_wasted_lanes(wasted_lanes) -> str:
    """09.2: one wasted lane per eos stop the host learns a step late (never for a max_tokens stop)."""
    cases = [([None], [5]), ([3], [5]), ([5], [5]), ([1, None, 4, 8], [8, 8, 8, 8]), ([2, 2, 2], [3, 2, 10])]
    for case in cases:
        want, got = _wasted(*case), wasted_lanes(*[list(x) for x in case])
        if got != want:
            raise AssertionError(f"wasted_lanes{case} = {got!r}, expected {want}: the next step is launched before "
                                 "the eos reaches the host, unless that token was the last one max_tokens allows "
                                 "(the scheduler knows the length limit in advance)")
    return "one lane per eos that arrives before max_tokens"


def check_lanes_and_pieces(lanes_and_pieces) -> str:
    """09.4: decode lanes and varlen pieces of a step, as plan_mixed_layout cuts it."""
    cases = [([1], 128), ([300], 128), ([1, 1, 5], 128), ([128, 129, 1, 2], 128), ([236, 1, 5], 64), ([1000], 512)]
    for case in cases:
        want, got = _lanes_and_pieces(*case), lanes_and_pieces(list(case[0]), case[1])
        if tuple(got) != want:
            raise AssertionError(f"lanes_and_pieces{case} = {got!r}, expected {want}: a one-token chunk is a lane, "
                                 "a longer chunk is cut into pieces of at most piece_len queries (the last one "
                                 "may be shorter)")
    return "the same counts plan_mixed_layout produces"


def check_merge(merge) -> str:
    """09.6: two partial attentions and their log-sum-exps merge into attention over all the keys."""
    import torch

    from nanoserve.attention.cascade import attend_with_lse

    g = torch.Generator().manual_seed(6)
    for split in (1, 7, 19):
        q, k, v = (torch.randn(shape, generator=g) for shape in ((3, 4, 8), (20, 2, 8), (20, 2, 8)))
        whole, _ = attend_with_lse(q, k, v)
        got = merge(*attend_with_lse(q, k[:split], v[:split]), *attend_with_lse(q, k[split:], v[split:]))
        if not torch.allclose(got, whole, atol=1e-5):
            raise AssertionError(f"with the keys split at {split} the merge is off by {(got - whole).abs().max():.3g}: "
                                 "weight each half by exp(its lse - the lse of both), where the lse of both is "
                                 "log(exp(lse_a) + exp(lse_b))")
    return "the same result as attending all the keys at once"


CHECKS = {"11.1": check_token_rows, "11.2": check_wasted_lanes, "11.4": check_lanes_and_pieces, "11.6": check_merge}
