"""Checkers for chapter 18's exercises (speculative decoding)."""
__all__ = ["CHECKS"]


def _cases():
    """(name, p, q) pairs over a 6-token vocabulary: one-hot proposals, close and far ones, and a q with zeros."""
    import torch

    p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    return [("a one-hot proposal on the favourite", p, torch.tensor([1.0, 0, 0, 0, 0, 0])),
            ("a one-hot proposal on an unlikely token", p, torch.tensor([0, 0, 0, 0, 1.0, 0])),
            ("a proposal close to p", p, torch.tensor([0.35, 0.30, 0.15, 0.10, 0.05, 0.05])),
            ("a proposal far from p", p, torch.tensor([0.05, 0.05, 0.10, 0.10, 0.30, 0.40])),
            ("a proposal that never draws two of p's tokens", p, torch.tensor([0.5, 0.5, 0, 0, 0, 0]))]


def check_accept(my_accept) -> str:
    """18.2: drafts drawn from q and passed through the rule come out distributed as p, for every case."""
    import torch

    g = torch.Generator().manual_seed(18)
    draws = 20_000

    def residual_draw(dist):
        dist = torch.as_tensor(dist, dtype=torch.float64)
        if dist.min() < -1e-9 or abs(float(dist.sum()) - 1) > 1e-6:
            raise AssertionError("residual_draw got something that is not a probability distribution: clamp "
                                 "p - q at 0 and divide by its sum")
        return int(torch.multinomial(dist.clamp(min=0).float(), 1, generator=g))

    for name, p, q in _cases():
        drafts = torch.multinomial(q, draws, replacement=True, generator=g).tolist()
        u = torch.rand(draws, generator=g).tolist()
        counts = torch.zeros_like(p)
        for d, ui in zip(drafts, u):
            token = my_accept(p.clone(), q.clone(), d, ui, residual_draw)
            if not isinstance(token, int) or not 0 <= token < len(p):
                raise AssertionError(f"my_accept must return a token id (an int in 0..{len(p) - 1}), got {token!r}")
            counts[token] += 1
        tv = 0.5 * float((counts / draws - p).abs().sum())
        if tv > 0.02:
            raise AssertionError(f"with {name} the emitted tokens are not distributed as p (total variation "
                                 f"{tv:.3f}): accept with probability min(1, p(d)/q(d)), else draw from "
                                 "max(p - q, 0) renormalised")
    return "every proposal's output is distributed as p"


CHECKS = {"18.2": check_accept}
