"""Run All in JupyterLab shows no exercise's answer, an exercise's instructions run as written after it, and the
figures of the benchmark chapter are shown near their own size in the notebook's column."""
import re

import pytest

from test_jupyterlab import assert_no_errors, lab, run_all  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

# what show_solution and a solved checker print: Run All on the committed chapter must print neither
ANSWER = re.compile(r"exercise [0-9A]\d?\.\d+(?:, one answer:| has a checker; a solution is in|: passed)")
MIN_SCALE = 0.75  # a figure shrunk below this in the column has labels too small to read


def exercise_answers(chapter) -> list:
    """Lines of the chapter's outputs that give an exercise's answer away."""
    return [line for line in chapter.output_text().splitlines() if ANSWER.search(line)]


def run_in_kernel(chapter, code: str):
    """Run `code` in the chapter's kernel (as a learner's new cell would); return its error or None."""
    return chapter.page.evaluate("""async code => {
        const future = window.__nb.sessionContext.session.kernel.requestExecute({code});
        let error = null;
        future.onIOPub = msg => { if (msg.header.msg_type === 'error')
            error = msg.content.ename + ': ' + msg.content.evalue; };
        await future.done;
        return error; }""", code)


def instruction_code(chapter, exercise: str) -> list:
    """The inline code spans of an exercise's Markdown that are statements to run (`name = ...` or calls)."""
    for cell in chapter.notebook()["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and f"**Exercise {exercise}**" in text:
            own = text.split(f"**Exercise {exercise}**", 1)[1].split("**Exercise ", 1)[0]
            return [c for c in re.findall(r"`([^`]+)`", own) if re.match(r"^\w+ = \w+\(|^\w+\(.*\)$", c)]
    raise AssertionError(f"{chapter.name}: no exercise {exercise}")


def figure_scales(chapter) -> list:
    """(natural width, shown width) of every picture in the notebook's outputs, in pixels."""
    return chapter.page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output img')]
        .filter(i => i.naturalWidth > 0).map(i => [i.naturalWidth, i.getBoundingClientRect().width])""")


def test_qwen3_run_all_shows_no_answer_and_exercise_01_5_runs_as_written(run_all):
    chapter = run_all("01_qwen3.ipynb")
    assert_no_errors(chapter)
    assert exercise_answers(chapter) == []
    steps = instruction_code(chapter, "01.5")  # make a fresh checkpoint (the cleanup cell deleted the chapter's)
    assert any("make_tiny_checkpoint" in s for s in steps) and any("load_qwen3" in s for s in steps), steps
    for step in steps:
        assert run_in_kernel(chapter, step) is None, f"exercise 01.5 says to run `{step}`, which fails"


def test_benchmark_run_all_shows_no_answer_and_readable_figures(run_all):
    chapter = run_all("15_benchmark.ipynb")
    assert_no_errors(chapter)
    assert exercise_answers(chapter) == []
    chapter.page.locator(".jp-OutputArea-output img").last.scroll_into_view_if_needed()
    scales = figure_scales(chapter)
    assert len(scales) >= 5, scales  # the workload, results and step-time figures
    small = [(natural, round(shown)) for natural, shown in scales if shown < MIN_SCALE * natural]
    assert small == [], f"figures shrunk below {MIN_SCALE:.0%} of their width: {small}"
