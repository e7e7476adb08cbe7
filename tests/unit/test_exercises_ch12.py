"""Exercise 12.4 (the mixed layout): the checker passes the solution, not the stub nor typical mistakes."""
import numpy as np
import pytest

from course.exercises import check_exercise
from course.solutions.ch12 import SOLUTIONS, WRONG


def _stub(step, piece_len=128):
    raise NotImplementedError


def _lanes_in_place(step, piece_len=128):
    """A mistake: the right lanes and pieces, but the rows keep the step's order (lanes not moved first)."""
    layout = SOLUTIONS["12.4"](step, piece_len)
    layout.order = np.arange(len(layout.order))
    return layout


def _pieces_floor(step, piece_len=128):
    """A mistake: a chunk's last, shorter piece is dropped."""
    layout = SOLUTIONS["12.4"](step, piece_len)
    keep = [i for i, (a, b) in enumerate(zip(layout.piece_starts, layout.piece_starts[1:])) if b - a == piece_len]
    if len(keep) == len(layout.piece_seqs):
        return layout
    layout.piece_seqs, layout.piece_keys = layout.piece_seqs[keep], layout.piece_keys[keep]
    layout.piece_starts = np.append(layout.piece_starts[keep], len(layout.order))
    return layout


def _fixed_piece_len(step, piece_len=128):
    """A mistake that passes only the default piece length: every layout cut at 128."""
    return SOLUTIONS["12.4"](step, 128)


def test_layout_checker_passes_the_solution_and_not_the_stub(capsys):
    check_exercise("12.4", SOLUTIONS["12.4"])
    assert "passed" in capsys.readouterr().out
    check_exercise("12.4", _stub)
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out


@pytest.mark.parametrize("mistake, field", [(WRONG["12.4"], "piece_keys"), (_lanes_in_place, "order"),
                                            (_pieces_floor, "piece_seqs"), (_fixed_piece_len, "piece_len 64")],
                         ids=["no-cached-prefix", "lanes-in-place", "last-piece-dropped", "fixed-piece-len"])
def test_layout_checker_names_the_wrong_field(mistake, field):
    with pytest.raises(AssertionError, match=field):
        check_exercise("12.4", mistake)


def test_the_readers_variant_plans_with_the_readers_layout():
    from course.exercises.ch12 import _layout_steps, mixed_step_with_layout
    from nanoserve.attention.torch_ref import TorchAttentionBackend

    seen = []

    def spy(step):
        seen.append(step)
        return SOLUTIONS["12.4"](step, 128)

    variant = mixed_step_with_layout(spy)(TorchAttentionBackend(), [512], 8, 512, 16)
    _, step, _ = _layout_steps()[2]  # a decode between two chunks
    plan = variant.plan(step)
    assert seen == [step] and plan.order[0] == 236 and plan.bucket == 512
