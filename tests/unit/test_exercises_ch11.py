"""Exercise 11.5 (the token-table lookup): the checker passes the solution, not the stub nor host-side answers."""
import pytest
import torch

from course.exercises import check_exercise
from course.exercises.ch11 import core_with_lookup
from course.solutions.ch11 import SOLUTIONS, WRONG


def _stub(input_ids, table):
    raise NotImplementedError


def _python_loop(input_ids, table):
    """A mistake: right ids, chosen row by row on the host."""
    return torch.tensor([int(table[-1 - i]) if i < 0 else int(i) for i in input_ids], dtype=torch.int64)


def _table_everywhere(input_ids, table):
    """A mistake: every row reads the table, prompt rows included."""
    return table[(-1 - input_ids).clamp(min=0)]


def _only_the_checkers_table(input_ids, table):
    """A mistake that knows the checker's own table (it starts at 100) and keeps the staged ids elsewhere."""
    if table.device.type == "meta" or (len(table) and int(table[0]) == 100):
        return SOLUTIONS["11.5"](input_ids, table)
    return input_ids.clone()


def test_lookup_checker_passes_the_solution_and_not_the_stub(capsys):
    check_exercise("11.5", SOLUTIONS["11.5"])
    assert "passed" in capsys.readouterr().out
    check_exercise("11.5", _stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out


@pytest.mark.parametrize("mistake, hint", [(WRONG["11.5"], "host"), (_python_loop, "host"),
                                           (_table_everywhere, "staged id"), (_only_the_checkers_table, "engine")],
                         ids=["boolean-mask", "python-loop", "table-everywhere", "engine-run"])
def test_lookup_checker_rejects_mistakes_with_a_hint(mistake, hint):
    with pytest.raises(AssertionError, match=hint):
        check_exercise("11.5", mistake)


def test_the_readers_core_resolves_every_reference_through_the_lookup():
    calls = []

    def spy(input_ids, table):
        calls.append(input_ids.clone())
        return SOLUTIONS["11.5"](input_ids, table)

    from course.exercises.ch11 import _engine_tokens

    want, got = _engine_tokens(core_with_lookup(spy))
    assert got == want
    assert calls and any((ids < 0).any() for ids in calls)
