"""Chapter 17's checkers run an answer through the engine: they pass the solution, not the stub or a typical mistake."""
import json
from pathlib import Path

import pytest

from course.exercises import check_exercise
from course.solutions.ch17 import SOLUTIONS, WRONG

pytest.importorskip("llguidance")
pytest.importorskip("jsonschema")
CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "17_structured_outputs.ipynb"


@pytest.mark.parametrize("exercise_id", ["17.2", "17.3"])
def test_checker_passes_the_solution_and_not_the_stub(exercise_id, capsys):
    check_exercise(exercise_id, SOLUTIONS[exercise_id])
    assert "passed" in capsys.readouterr().out
    check_exercise(exercise_id, None)  # the chapter's stub: the answer is still None
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out
    with pytest.raises(AssertionError, match="hint"):
        check_exercise(exercise_id, WRONG[exercise_id])


def test_the_date_checker_names_digits_of_other_scripts():
    with pytest.raises(AssertionError, match=r"\[0-9\]"):
        check_exercise("17.2", r"2026-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])")


def test_the_engine_refuses_what_python_re_allows():
    lookahead = r"2026-(?!00)(0[1-9]|1[0-2])-(?!00)(0[1-9]|[12][0-9]|3[01])"
    with pytest.raises(AssertionError, match="refused"):
        check_exercise("17.2", lookahead)


def test_run_all_does_not_print_the_answers():
    outputs = json.dumps([c.get("outputs", []) for c in json.loads(CHAPTER.read_text())["cells"]])
    assert SOLUTIONS["17.2"] not in outputs and "is_capital" not in outputs
