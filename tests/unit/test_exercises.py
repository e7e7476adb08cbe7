"""Every exercise checker accepts its solution and rejects a typical mistake; every exercise has an answer."""
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

import nanoserve.course.exercises as exercises
import nanoserve.course.solutions as solutions
from nanoserve.course.exercises import check_exercise, show_solution

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"
EXERCISE = re.compile(r"\*\*Exercise (\d\d\.\d+)\*\*")


def _tables(package, name: str) -> dict:
    """exercise id -> entry of table `name` across every chapter module of `package`."""
    out = {}
    for info in pkgutil.iter_modules(package.__path__):
        out.update(getattr(importlib.import_module(f"{package.__name__}.{info.name}"), name, {}))
    return out


CHECKS = _tables(exercises, "CHECKS")
SOLUTIONS = _tables(solutions, "SOLUTIONS")
WRONG = _tables(solutions, "WRONG")
EXPLANATIONS = _tables(solutions, "EXPLANATIONS")


def _chapter_exercise_ids() -> set:
    ids = set()
    for nb_path in CHAPTERS.glob("*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                ids.update(EXERCISE.findall("".join(cell["source"])))
    return ids


@pytest.mark.parametrize("exercise_id", sorted(CHECKS))
def test_checker_accepts_solution_and_rejects_mistake(exercise_id, capsys):
    assert exercise_id in SOLUTIONS, f"exercise {exercise_id} has a checker but no solution"
    assert exercise_id in WRONG, f"exercise {exercise_id} has a checker but no typical mistake to reject"
    check_exercise(exercise_id, SOLUTIONS[exercise_id])
    assert "passed" in capsys.readouterr().out
    with pytest.raises(AssertionError):
        check_exercise(exercise_id, WRONG[exercise_id])


def test_every_chapter_exercise_has_a_checker_or_solution():
    missing = sorted(i for i in _chapter_exercise_ids() if i not in CHECKS and i not in EXPLANATIONS)
    assert not missing, f"exercises without a checker or a written solution: {missing}"


@pytest.mark.parametrize("exercise_id", sorted(EXPLANATIONS))
def test_written_solutions_print(exercise_id, capsys):
    show_solution(exercise_id)
    assert exercise_id in capsys.readouterr().out


def test_stub_is_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    if not CHECKS:
        pytest.skip("no checkers yet")
    exercise_id = sorted(CHECKS)[0]
    check_exercise(exercise_id, stub)
    assert "not attempted" in capsys.readouterr().out


def test_unknown_exercise_is_a_clear_error():
    with pytest.raises(ValueError):
        check_exercise("99.9", lambda: None)
    with pytest.raises(ValueError):
        check_exercise("nonsense", lambda: None)
