"""Chapters 11-13: the build-it-yourself checkers pass the solution and not the stub; the merge can run the chapter."""
import pytest
import torch

from course.exercises import check_exercise
from course.solutions import ch11, ch12, ch13

SOLUTIONS = {**ch11.SOLUTIONS, **ch12.SOLUTIONS, **ch13.SOLUTIONS}
WRONG = {**ch11.WRONG, **ch12.WRONG, **ch13.WRONG}


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("exercise_id", ["11.1", "11.4", "12.1", "12.3", "13.1", "13.2", "13.4"])
def test_checker_passes_the_solution_not_the_stub_nor_the_mistake(exercise_id, capsys):
    check_exercise(exercise_id, SOLUTIONS[exercise_id])
    assert "passed" in capsys.readouterr().out
    check_exercise(exercise_id, _stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out
    with pytest.raises(AssertionError):
        check_exercise(exercise_id, WRONG[exercise_id])


def test_the_readers_merge_runs_the_cascade_variant(monkeypatch):
    import nanoserve.attention.cascade as cascade

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(shape, generator=g) for shape in ((2, 4, 8), (12, 2, 8), (12, 2, 8)))
    whole, _ = cascade.attend_with_lse(q, k, v)
    monkeypatch.setattr(cascade, "merge_attention", SOLUTIONS["13.1"])
    halves = cascade.attend_with_lse(q, k[:5], v[:5]) + cascade.attend_with_lse(q, k[5:], v[5:])
    torch.testing.assert_close(cascade.merge_attention(*halves), whole)
