"""Every exercise checker accepts its solution and rejects a typical mistake; every exercise has an answer."""
import importlib
import json
import pkgutil
import re
from collections import Counter
from pathlib import Path

import pytest

import course.exercises as exercises
import course.solutions as solutions
from course.exercises import check_exercise, show_solution

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"
EXERCISE = re.compile(r"\*\*Exercise ((?:\d\d|A\d)\.\d+)\*\*")  # chapters 00-19 and appendices A1-A7


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


def _chapter_exercise_headings() -> list:
    """Every "**Exercise N.M**" id in the chapters' prose, once per heading."""
    ids = []
    for nb_path in CHAPTERS.glob("*.ipynb"):
        for cell in json.loads(nb_path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                ids += EXERCISE.findall("".join(cell["source"]))
    return ids


def _chapter_exercise_ids() -> set:
    return set(_chapter_exercise_headings())


def test_every_exercise_id_names_one_exercise():
    repeated = sorted(i for i, n in Counter(_chapter_exercise_headings()).items() if n > 1)
    assert not repeated, f"exercise ids given to two exercises: {repeated}"


def test_no_solution_or_checker_table_repeats_an_id():
    """A repeated key in a dict literal silently keeps the last entry: one exercise's answer would be lost."""
    import ast

    repeated = []
    for path in [*Path(solutions.__file__).parent.glob("*.py"), *Path(exercises.__file__).parent.glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
                repeated += [f"{path.name}: {k}" for k in sorted(set(keys)) if keys.count(k) > 1]
    assert not repeated, f"solution or checker tables with a repeated exercise id: {repeated}"


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


def _stub_block_manager():
    class MyBlockManager:
        def __init__(self, num_blocks, block_size):
            raise NotImplementedError
    return MyBlockManager


def _stub_prefix_match():
    def longest_cached_prefix(token_ids, block_size, lookup):
        raise NotImplementedError
    return longest_cached_prefix


def _stub_scheduler():
    from nanoserve.engine.scheduler import Scheduler

    class MyScheduler(Scheduler):
        def schedule(self):
            raise NotImplementedError
    return MyScheduler


def _stub_step_layout():
    def flat_step_layout(token_chunks, starts, block_tables, block_size):
        raise NotImplementedError
    return flat_step_layout


def _stub_decode_staging():
    from nanoserve.attention.paged_decode import PagedDecode

    class MyPagedDecode(PagedDecode):
        def bucket_for(self, step):
            raise NotImplementedError
    return MyPagedDecode


@pytest.mark.parametrize("exercise_id, stub", [("03.6", _stub_block_manager), ("04.7", _stub_prefix_match),
                                               ("05.6", _stub_scheduler),
                                               ("09.6", _stub_decode_staging),
                                               ("07.1", _stub_step_layout)])
def test_build_it_yourself_checkers_pass_the_solution_and_not_the_stub(exercise_id, stub, capsys):
    check_exercise(exercise_id, SOLUTIONS[exercise_id])
    assert "passed" in capsys.readouterr().out
    check_exercise(exercise_id, stub())
    out = capsys.readouterr().out
    assert "not attempted" in out and "passed" not in out
    with pytest.raises(AssertionError):
        check_exercise(exercise_id, WRONG[exercise_id])


def test_the_readers_prefix_match_runs_a_whole_manager():
    from course.build import with_prefix_match

    manager = with_prefix_match(SOLUTIONS["04.7"])(num_blocks=8, block_size=4)
    prompt = list(range(1, 11))
    table = manager.allocate([], len(prompt))
    manager.cache_blocks(table, prompt, len(prompt))
    manager.free(table)
    again = manager.match_prefix(prompt)
    assert len(again) == 2 and manager.hit_rate == 0.8 and manager.num_free_blocks == 6
