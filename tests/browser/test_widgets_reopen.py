"""After Run All and save, a reopened chapter shows its widgets' first state; no widget shows a traceback."""
import pytest

from labdriver import Chapter
from test_jupyterlab import INTERACT, assert_no_errors, lab, run_all  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

WIDGET_CELLS = [("03_paged_kv.ipynb", "display_with_snapshot(pool_explorer"),
                ("04_prefix_cache.ipynb", "display_with_snapshot(chain_explorer"),
                ("05_scheduler.ipynb", "display_with_snapshot(stepper")]


@pytest.mark.parametrize("name, widget_cell", WIDGET_CELLS)
def test_widgets_survive_run_all_save_and_reopen(lab, run_all, name, widget_cell):
    chapter = run_all(name)
    assert_no_errors(chapter)
    assert chapter.widget_errors() == []
    chapter.save()
    chapter.close()
    reopened = Chapter(*lab, name)
    try:
        reopened.wait_for_kernel()
        cell = reopened.page.locator(".jp-CodeCell", has_text=widget_cell).first
        cell.scroll_into_view_if_needed()
        output = cell.locator(".jp-OutputArea-output").first
        output.wait_for(timeout=30_000)
        reopened.page.wait_for_function(
            "n => !n.innerText.includes('Loading widget')", arg=output.element_handle(), timeout=30_000)
        reopened.screenshot("reopened")
        text = output.inner_text()
        assert "Error displaying widget" not in text, f"{name}: {text[:200]}"
        assert output.locator(".jupyter-widgets, img").count() > 0 or "block pool" in text, text[:200]
    finally:
        reopened.close()


def test_pool_explorer_at_its_limits_prints_no_traceback(run_all):
    chapter = run_all("03_paged_kv.ipynb")
    handles = chapter.page.locator(f"{INTERACT} .widget-slider .noUi-handle")
    for i in range(3):  # seq_0, seq_1, seq_2 to their maximum, 40
        handle = handles.nth(i)
        handle.scroll_into_view_if_needed()
        handle.focus()
        handle.press("End")
    chapter.page.wait_for_function(
        "sel => document.querySelector(sel)?.innerText.includes('need more than')",
        arg=f"{INTERACT} .widget-output", timeout=60_000)
    chapter.screenshot("sliders-at-40")
    assert chapter.widget_errors() == []
