"""A learner's Run All in JupyterLab (headless chromium): chapters run clean and their widgets work."""
import os

import pytest

from labdriver import Chapter, course_in_lab, describe_errors, missing_stack

pytestmark = pytest.mark.slow

INTERACT = ".widget-interact"  # the VBox that ipywidgets.interact builds
INTERACT_OUTPUT = f"{INTERACT} .widget-output"
STEPPER_OUTPUT = ".widget-vbox:has(.widget-button) > .widget-output"


@pytest.fixture(scope="module")
def lab():
    """(server, browser) for a copy of chapters/; fails under CI and skips elsewhere without the stack."""
    reason = missing_stack()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run under CI but cannot: {reason}")
        pytest.skip(f"browser stack missing: {reason}")
    with course_in_lab() as server_and_browser:
        yield server_and_browser


@pytest.fixture
def run_all(lab):
    """Open a chapter, wait for its kernel, Run All Cells, screenshot it; close it after the test."""
    opened = []

    def run(name):
        chapter = Chapter(*lab, name)
        opened.append(chapter)
        chapter.wait_for_kernel()
        seconds = chapter.run_all()
        chapter.screenshot("after-run-all", whole_notebook=True)
        print(f"{name}: Run All took {seconds:.1f} s")
        return chapter

    yield run
    for chapter in opened:
        chapter.close()


def assert_no_errors(chapter):
    """Fail with every error output (cell index, exception) after Run All; stderr streams are fine."""
    errors = chapter.error_outputs()
    lines = describe_errors(errors)
    for line in lines:
        print(f"{chapter.name}: {line}")
    skipped = chapter.unexecuted_cells()
    note = f"\n{len(skipped)} later code cell(s) never ran (Run All stops at an error)" if skipped else ""
    assert not errors, f"{chapter.name}: {len(errors)} error output(s) after Run All:\n" + "\n".join(lines) + note
    assert not skipped, f"{chapter.name}: code cells {skipped} did not run"


def assert_real_widgets(chapter, *selectors):
    """Widgets render as controls, not as their text repr."""
    assert "interactive(children=" not in chapter.output_text(), f"{chapter.name}: a widget rendered as text"
    for selector in (".jupyter-widgets",) + selectors:
        assert chapter.page.locator(selector).count() > 0, f"{chapter.name}: no {selector} element rendered"


def assert_view_changes(chapter, view, control, use, label):
    """Use a widget control the way a learner would; the widget's output view must change."""
    before = chapter.view_of(view)
    control.scroll_into_view_if_needed()
    use(control)
    after = chapter.wait_for_change(view, before)
    chapter.screenshot(label)
    assert after != before


def test_paged_kv_slider_redraws_the_pool(run_all):
    chapter = run_all("03_paged_kv.ipynb")
    assert_no_errors(chapter)
    assert_real_widgets(chapter, f"{INTERACT} .widget-slider", f"{INTERACT} .widget-output img")

    handle = chapter.page.locator(f"{INTERACT} .widget-slider .noUi-handle").first  # seq_0, the first sequence length
    assert_view_changes(chapter, INTERACT_OUTPUT, handle, lambda h: (h.focus(), h.press("ArrowRight")), "after-slider")


def test_scheduler_step_button_advances(run_all):
    chapter = run_all("05_scheduler.ipynb")
    assert_no_errors(chapter)
    assert_real_widgets(chapter, ".widget-button")

    button = chapter.page.locator(".widget-button", has_text="step").first
    assert_view_changes(chapter, STEPPER_OUTPUT, button, lambda b: b.click(), "after-step")


def test_flash_attention_runs_on_cpu(run_all):
    chapter = run_all("08_flash_attention.ipynb")
    assert_no_errors(chapter)


@pytest.mark.parametrize("name, widget_cell, first_state", [
    ("03_paged_kv.ipynb", "display_with_snapshot(pool_explorer", "img"),
    ("04_prefix_cache.ipynb", "display_with_snapshot(chain_explorer", "img"),
    ("05_scheduler.ipynb", "display_with_snapshot(stepper", "text=block pool"),
])
def test_widgets_show_their_first_state_before_running(lab, name, widget_cell, first_state):
    chapter = Chapter(*lab, name)
    try:
        chapter.wait_for_kernel()
        cell = chapter.page.locator(".jp-CodeCell", has_text=widget_cell).first
        cell.scroll_into_view_if_needed()
        output = cell.locator(".jp-OutputArea-output").first
        output.wait_for(timeout=30_000)
        chapter.screenshot("opened")
        text = output.inner_text()
        assert "interactive(children=" not in text and "VBox(children=" not in text, text[:200]
        if first_state == "img":
            assert output.locator("img").count() == 1, f"{name}: no picture of the widget's first state"
        else:
            assert first_state.removeprefix("text=") in text, f"{name}: the first state is not shown: {text[:200]}"
    finally:
        chapter.close()
