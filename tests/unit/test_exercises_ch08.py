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


def test_fresh_prefill_checker_passes_the_host_test_and_rejects_is_decode(capsys):
    check_exercise("08.4", SOLUTIONS["08.4"])
    assert "passed" in capsys.readouterr().out
    check_exercise("08.4", lambda step: (_ for _ in ()).throw(NotImplementedError))
    assert "not attempted" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="prefix hit|later chunk|beside a decode"):
        check_exercise("08.4", WRONG["08.4"])


def test_fresh_prefill_is_decided_from_host_tensors():
    """The written answer's premise: the step's cumulative lengths live in host memory, no GPU read needed."""
    from nanoserve.engine.model_runner import build_step_inputs

    step = build_step_inputs([[5, 6, 7], [8, 9]], [0, 0], [[0], [1]], [True, True], block_size=256)
    assert step.cu_seqlens_q.device.type == step.cu_seqlens_k.device.type == "cpu"
    assert SOLUTIONS["08.4"](step) is True
