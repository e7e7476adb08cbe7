"""Exercise checkers: `check_exercise("05.1", my_fn)` tells a reader whether an answer works.

Each chapter's checkers live in `chNN.py` as `CHECKS = {"05.1": check_fn}`; a checker raises AssertionError
with a hint when the answer is wrong and returns a short success message otherwise. Written answers to
discussion exercises live in `course/solutions/chNN.py` (`EXPLANATIONS`), shown by `show_solution`.
Hand-written, not exported by a chapter.
"""
import importlib

__all__ = ["check_exercise", "show_solution", "checks_of", "chapter_of"]


def chapter_of(exercise_id: str) -> str:
    """The chapter module name ("ch05") of an exercise id such as "05.1"."""
    if not isinstance(exercise_id, str) or "." not in exercise_id:
        raise ValueError(f"an exercise id looks like '05.1', got {exercise_id!r}")
    return "ch" + exercise_id.split(".", 1)[0]


def _module(package: str, exercise_id: str):
    """The chapter's checker or solution module, or None when the chapter has none."""
    try:
        return importlib.import_module(f"{__name__.rsplit('.', 1)[0]}.{package}.{chapter_of(exercise_id)}")
    except ModuleNotFoundError:
        return None


def checks_of(exercise_id: str) -> dict:
    """The CHECKS table of the chapter that `exercise_id` belongs to ({} when it has none)."""
    module = _module("exercises", exercise_id)
    return dict(getattr(module, "CHECKS", {})) if module is not None else {}


def check_exercise(exercise_id: str, answer) -> None:
    """Run the checker of `exercise_id` on `answer` and print the verdict.

    An answer that is still the chapter's stub (it raises NotImplementedError) is reported as not attempted,
    so Run All never stops here; a wrong answer raises the checker's AssertionError with its hint."""
    check = checks_of(exercise_id).get(exercise_id)
    if check is None:
        raise ValueError(f"exercise {exercise_id} has no checker; try show_solution({exercise_id!r})")
    try:
        message = check(answer)
    except NotImplementedError:
        print(f"exercise {exercise_id}: not attempted yet (the stub raises NotImplementedError); "
              "write your answer and run this cell again")
        return
    print(f"exercise {exercise_id}: passed" + (f" — {message}" if message else ""))


def show_solution(exercise_id: str) -> None:
    """Print the written solution of a discussion exercise (or say where the checked one's solution is)."""
    module = _module("solutions", exercise_id)
    explanations = getattr(module, "EXPLANATIONS", {}) if module is not None else {}
    if exercise_id in explanations:
        print(f"exercise {exercise_id}, one answer:\n{explanations[exercise_id]}")
    elif exercise_id in getattr(module, "SOLUTIONS", {}):
        print(f"exercise {exercise_id} has a checker; a solution is in course/solutions/"
              f"{chapter_of(exercise_id)}.py (SOLUTIONS[{exercise_id!r}])")
    else:
        raise ValueError(f"exercise {exercise_id} has no written solution")
