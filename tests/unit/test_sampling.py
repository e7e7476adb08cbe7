"""Sampler: each filter's empirical distribution matches its definition; seeds reproduce."""
import math

import pytest
import torch

from nanoserve.sampling import SamplingParams, derive_seed
from nanoserve.sampler import Sampler

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -1.0, -3.0])
DRAWS = 8000


def reference(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """The definitions, one token at a time: temperature, then top-k, top-p, min-p; renormalised."""
    probs = (logits / temperature).softmax(-1).tolist()
    order = sorted(range(len(probs)), key=lambda i: -probs[i])
    keep = set(order[: top_k] if top_k > 0 else order)
    kept = [i for i in order if i in keep]
    total = sum(probs[i] for i in kept)
    mass, nucleus = 0.0, []
    for i in kept:  # smallest prefix whose mass reaches top_p
        nucleus.append(i)
        mass += probs[i] / total
        if mass >= top_p:
            break
    best = max(probs[i] for i in nucleus)
    final = [i for i in nucleus if probs[i] >= min_p * best]
    z = sum(probs[i] for i in final)
    return torch.tensor([probs[i] / z if i in final else 0.0 for i in range(len(probs))])


def empirical(params, draws=DRAWS, seed=0):
    sampler = Sampler(torch.Generator().manual_seed(seed))
    tokens = sampler(LOGITS.expand(draws, -1).clone(), [params] * draws)
    return torch.bincount(tokens, minlength=len(LOGITS)).double() / draws


CASES = {
    "plain": dict(),
    "hot": dict(temperature=2.0),
    "cold": dict(temperature=0.5),
    "top_k": dict(top_k=3),
    "top_p": dict(top_p=0.8),
    "min_p": dict(min_p=0.3),
    "all": dict(temperature=0.8, top_k=5, top_p=0.9, min_p=0.1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_empirical_distribution_matches_definition(name):
    kwargs = CASES[name]
    want = reference(LOGITS, **kwargs)
    got = empirical(SamplingParams(**kwargs))
    assert torch.all(got[want == 0] == 0), "a filtered token was sampled"
    # 4.5 standard errors of a frequency estimate: fails by chance about once in 10^5 runs
    tolerance = 4.5 * torch.sqrt(want * (1 - want) / DRAWS) + 1e-9
    assert torch.all((got - want.double()).abs() <= tolerance.double()), (got, want)


def test_top_k_off_values_and_top_k_larger_than_vocab():
    for k in (0, -1, 100):
        assert torch.equal(empirical(SamplingParams(top_k=k), draws=500, seed=1),
                           empirical(SamplingParams(), draws=500, seed=1))


def test_greedy_is_argmax_and_mixes_with_sampled_rows():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.0)] * 3
    out = Sampler(torch.Generator().manual_seed(0))(logits, params)
    assert out[0::2].tolist() == logits[0::2].argmax(-1).tolist()
    assert out.dtype == torch.long and out.shape == (6,)


def test_tiny_top_p_is_greedy():
    logits = torch.randn(20, 30, generator=torch.Generator().manual_seed(2))
    out = Sampler()(logits, [SamplingParams(top_p=1e-6)] * 20)
    assert out.tolist() == logits.argmax(-1).tolist()


def test_seeded_row_ignores_batch_mates():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 100, generator=g)
    params = SamplingParams(temperature=1.0, seed=7)

    def draw(rows, row):
        gens = [None] * len(rows)
        gens[row] = torch.Generator().manual_seed(params.seed)
        ps = [SamplingParams(temperature=1.3)] * len(rows)
        ps[row] = params
        engine_rng = torch.Generator().manual_seed(len(rows))  # batch mates draw from a varying stream
        return int(Sampler(engine_rng)(rows, ps, gens)[row])

    alone = draw(logits[2:3], 0)
    assert draw(logits, 2) == alone
    assert draw(torch.cat([logits[4:], logits[2:3]]), 1) == alone


def test_seeded_sequence_of_draws_repeats():
    logits = torch.randn(1, 64, generator=torch.Generator().manual_seed(3))
    p = SamplingParams(temperature=1.0, seed=123)

    def run():
        gen = torch.Generator().manual_seed(p.seed)
        return [int(Sampler()(logits, [p], [gen])) for _ in range(20)]

    a, b = run(), run()
    assert a == b and len(set(a)) > 1


def test_derived_seeds_differ_and_keep_the_first():
    assert derive_seed(5, 0) == 5
    seeds = {derive_seed(5, i) for i in range(10)}
    assert len(seeds) == 10 and all(0 <= s < 2**63 for s in seeds - {5})
    p = SamplingParams(n=3, seed=5)
    assert [p.for_completion(i).seed for i in range(3)] == [derive_seed(5, i) for i in range(3)]
    assert p.for_completion(2).n == 1
    one = p.for_completion(0)  # a copy: a caller who edits its params later cannot reach a live request
    assert one is not p and p.n == 3 and p.seed == 5 and one.max_tokens == p.max_tokens


def test_wrong_params_count_is_rejected():
    with pytest.raises(ValueError, match="SamplingParams"):
        Sampler()(torch.zeros(2, 5), [SamplingParams()])


def test_no_nan_with_extreme_logits():
    logits = torch.tensor([[1e4, -1e4, 0.0, float("-inf")]] * 100)
    out = Sampler(torch.Generator().manual_seed(0))(logits, [SamplingParams(temperature=0.01, min_p=0.5)] * 100)
    assert out.tolist() == [0] * 100
    assert not math.isnan(float(out.float().sum()))
