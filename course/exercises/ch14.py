"""Checkers for chapter 14's exercises (tensor parallelism): kv heads per rank, greedy sampling from shards."""
import torch

from nanoserve.parallel.group import TPGroup
from nanoserve.parallel.layers import QKVParallelLinear

CASES = [(2, 4, 2), (4, 16, 8), (4, 8, 2), (8, 16, 2), (4, 4, 1), (2, 6, 6)]  # (tp, q heads, kv heads)


def _loaded_kv_heads(rank: int, tp: int, n_heads: int, n_kv_heads: int) -> list:
    """The kv heads QKVParallelLinear really loads on `rank`, read off its weight loader with a labelled tensor."""
    group = TPGroup(rank, tp, process_group=None if tp == 1 else "placeholder: no collectives")
    layer = QKVParallelLinear(8, 1, n_heads, n_kv_heads, group=group)
    labelled = torch.arange(n_kv_heads, dtype=torch.float32)[:, None].expand(n_kv_heads, 8)  # row i holds i
    layer.weight.weight_loader(layer.weight, labelled, "k")
    first, rows = layer.shard_range("k")
    return [int(v) for v in layer.weight.data[first:first + rows, 0]]


def check_kv_heads_of_rank(kv_heads_of_rank) -> str:
    """10.1: kv_heads_of_rank(rank, tp_size, n_heads, n_kv_heads) must match QKVParallelLinear's loader."""
    for tp, n_heads, n_kv in CASES:
        for rank in range(tp):
            want = _loaded_kv_heads(rank, tp, n_heads, n_kv)
            got = list(kv_heads_of_rank(rank, tp, n_heads, n_kv))
            assert got == want, (f"hint: tp={tp}, {n_heads} q heads, {n_kv} kv heads: rank {rank} holds kv heads {want}, "
                                 f"not {got}; query head h reads kv head h // (n_heads // n_kv_heads), and a rank "
                                 "holds the kv heads its own q heads read")
    return f"matches QKVParallelLinear on {sum(tp for tp, _, _ in CASES)} (rank, layout) cases, replicated kv heads included"


def check_greedy_from_shards(greedy_from_shards) -> str:
    """10.2: greedy_from_shards(list of [rows, V/tp] logits) must equal the argmax of the full logits."""
    gen = torch.Generator().manual_seed(10)
    for tp in (2, 4):
        logits = torch.randn(5, 24, generator=gen)
        logits[0, 23] = 50.0  # the best token sits in the last rank's slice
        logits[1, 2] = 50.0  # ... and in the first rank's slice
        got = torch.as_tensor(greedy_from_shards(list(logits.chunk(tp, dim=-1))))
        assert got.shape == (5,), f"hint: one token id per row, shape (5,), got {tuple(got.shape)}"
        assert torch.equal(got.long(), logits.argmax(-1)), \
            "hint: a rank's local argmax is an index into its slice; add the slice's first id (rank * vocab / tp)"
    return "equals the argmax of the full logits at tp=2 and tp=4"


CHECKS = {"14.1": check_kv_heads_of_rank, "14.2": check_greedy_from_shards}
