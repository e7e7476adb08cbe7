"""Exercise 11.5 (the token-table lookup): the checker passes the solution, not the stub nor host-side answers."""
import pytest
import torch

from course.exercises import check_exercise
from course.exercises.ch11 import runner_with_lookup
from course.solutions.ch11 import SOLUTIONS, WRONG


def _stub(input_ids, token_rows, table):
    raise NotImplementedError


def _python_loop(input_ids, token_rows, table):
    """A mistake: right ids, chosen row by row on the host."""
    return torch.tensor([int(table[r]) if r >= 0 else int(i) for i, r in zip(input_ids, token_rows)],
                        dtype=torch.int64)


def _table_everywhere(input_ids, token_rows, table):
    """A mistake: every row reads the table, prompt rows included."""
    return table[token_rows.clamp(min=0)]


def _only_the_checkers_table(input_ids, token_rows, table):
    """A mistake that knows the checker's own table (it starts at 100) and keeps the staged ids elsewhere."""
    if table.device.type == "meta" or (len(table) and int(table[0]) == 100):
        return SOLUTIONS["11.5"](input_ids, token_rows, table)
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


def test_the_readers_runner_reads_every_table_row_through_the_lookup():
    calls = []

    def spy(input_ids, token_rows, table):
        calls.append(token_rows.clone())
        return SOLUTIONS["11.5"](input_ids, token_rows, table)

    from course.exercises.ch11 import _engine_tokens

    want, got = _engine_tokens(runner_with_lookup(spy))
    assert got == want
    assert calls and any((rows >= 0).any() for rows in calls)
