"""Checkers for chapter 09's exercises (CUDA graphs, fused kernels)."""
import torch

from nanoserve.attention.paged_decode import pick_bucket as bucket_for
from nanoserve.engine.graph_runner import graph_buckets, graph_sample

__all__ = ["CHECKS"]


def _worst_padding(buckets) -> float:
    return max((bucket_for(n, buckets) - n) / bucket_for(n, buckets) for n in range(1, max(buckets) + 1))


def check_worst_padding(worst_padding) -> str:
    """08.1: the worst share of padding lanes over every batch size a bucket grid serves."""
    grids = [graph_buckets(256), [1 << i for i in range(9)], [4, 8], [1], graph_buckets(20)]
    for buckets in grids:
        want, got = _worst_padding(buckets), worst_padding(list(buckets))
        if not isinstance(got, (int, float)) or abs(got - want) > 1e-9:
            raise AssertionError(f"worst_padding({buckets}) = {got!r}, expected {want:.4f}: try every batch size n "
                                 "from 1 to the largest bucket, pad it to bucket_for(n, buckets), and take the "
                                 "largest (bucket - n) / bucket")
    ours, pow2 = _worst_padding(graph_buckets(256)), _worst_padding([1 << i for i in range(9)])
    return f"the engine's grid wastes at most {ours:.0%} of a step, powers of two up to {pow2:.0%}"


def check_race_sample(race_sample) -> str:
    """08.2: exponential-race sampling equals the graph's sampler on the same noise."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 50, generator=g) * 3
    temperatures = torch.tensor([0.0, 0.5, 1.0, 1.7, 0.0, 0.9])
    noise = torch.empty(6, 50).exponential_(generator=g)
    want = torch.where(temperatures == 0, logits.argmax(-1),
                       ((logits / torch.where(temperatures == 0, 1.0, temperatures)[:, None]).softmax(-1) / noise).argmax(-1))
    got = race_sample(logits.clone(), temperatures.clone(), noise.clone())
    if not isinstance(got, torch.Tensor) or got.tolist() != want.tolist():
        raise AssertionError(f"expected tokens {want.tolist()}, got {got if not isinstance(got, torch.Tensor) else got.tolist()}: "
                             "divide the probabilities by the noise (not multiply), and let T == 0 rows take "
                             "the argmax of the logits")
    greedy = (temperatures == 0).to(torch.int32)
    graph = graph_sample(logits, torch.where(temperatures == 0, 1.0, temperatures), greedy, None)
    assert graph.shape == want.shape
    return "the same race the decode graphs capture"


CHECKS = {"09.1": check_worst_padding, "09.2": check_race_sample}
