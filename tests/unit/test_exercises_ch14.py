"""Exercise 14.5 (the weight loaders' shards): the checker passes the solution, not the stub nor typical mistakes."""
import pytest
import torch

from course.exercises import check_exercise
from course.exercises.ch14 import layers_with_shard_range
from course.solutions.ch14 import SOLUTIONS, WRONG
from nanoserve.parallel.group import TPGroup


def _stub(kind, full_shape, rank, tp_size):
    raise NotImplementedError


def _row_split_by_rows(kind, full_shape, rank, tp_size):
    """A mistake: a row-parallel weight cut along dim 0, like a column-parallel one."""
    return SOLUTIONS["14.5"]("column" if kind == "row" else kind, full_shape, rank, tp_size)


def _vocab_blocks_start_too_early(kind, full_shape, rank, tp_size):
    """A mistake: blocks of ceil(vocab / tp) ids, but started at rank * (vocab // tp), so they overlap."""
    if kind == "vocab":
        block = -(-full_shape[0] // tp_size)
        start = rank * (full_shape[0] // tp_size)
        return 0, start, min(block, full_shape[0] - start)
    return SOLUTIONS["14.5"](kind, full_shape, rank, tp_size)


def _column_rank_reversed(kind, full_shape, rank, tp_size):
    """A mistake: ranks take the column slices in reverse order."""
    return SOLUTIONS["14.5"](kind, full_shape, tp_size - 1 - rank if kind == "column" else rank, tp_size)


def test_shard_checker_passes_the_solution_and_not_the_stub(capsys):
    check_exercise("14.5", SOLUTIONS["14.5"])
    assert "passed" in capsys.readouterr().out
    check_exercise("14.5", _stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out


@pytest.mark.parametrize("mistake, hint", [(WRONG["14.5"], "ceil"), (_row_split_by_rows, "dim 1"),
                                           (_vocab_blocks_start_too_early, "rank·block"),
                                           (_column_rank_reversed, "rank·out/tp")],
                         ids=["vocab-floor", "row-by-rows", "vocab-overlap", "column-reversed"])
def test_shard_checker_rejects_mistakes_with_a_hint(mistake, hint):
    with pytest.raises(AssertionError, match=hint):
        check_exercise("14.5", mistake)


def test_the_readers_layers_compute_the_split_matmuls():
    """Two ranks loaded through the solution's ranges: column slices side by side and row partial sums are dense."""
    readers = layers_with_shard_range(SOLUTIONS["14.5"])
    W, x = torch.randn(6, 8), torch.randn(3, 8)
    groups = [TPGroup(r, 2, process_group="placeholder: no collectives") for r in range(2)]
    columns = [readers["ColumnParallelLinear"](8, 6, group=g) for g in groups]
    rows = [readers["RowParallelLinear"](8, 6, group=g) for g in groups]
    for layer in columns + rows:
        layer.weight.weight_loader(layer.weight, W)
    torch.testing.assert_close(torch.cat([x @ c.weight.T for c in columns], dim=1), x @ W.T)
    torch.testing.assert_close(sum(x[:, 4 * r:4 * r + 4] @ rows[r].weight.T for r in range(2)), x @ W.T)
