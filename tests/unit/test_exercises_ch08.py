"""Exercise 08.5 (decode attention over a block table): the checker passes the solution, not the stub or mistakes."""
import pytest

from course.exercises import check_exercise
from course.solutions.ch08 import SOLUTIONS, WRONG, _streamed_decode


def _stub(q, k_cache, v_cache, batch):
    raise NotImplementedError


def _reads_padding_entries(q, k_cache, v_cache, batch):
    """A mistake: walk the whole padded block table, -1 entries included."""
    lens = batch.context_lens.clone()
    batch.context_lens[:] = k_cache.shape[1] * batch.block_tables.shape[1]
    try:
        return _streamed_decode(q, k_cache, v_cache, batch, trim_last_block=True)
    finally:
        batch.context_lens[:] = lens


def test_decode_checker_passes_the_solution_and_not_the_stub(capsys):
    check_exercise("08.5", SOLUTIONS["08.5"])
    assert "passed" in capsys.readouterr().out
    check_exercise("08.5", _stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out


@pytest.mark.parametrize("mistake", [WRONG["08.5"], _reads_padding_entries], ids=["whole-last-block", "padding"])
def test_decode_checker_rejects_mistakes_with_a_hint(mistake):
    with pytest.raises(AssertionError, match="block"):
        check_exercise("08.5", mistake)
