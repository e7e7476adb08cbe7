"""Course aids: the you-are-here strip, exported line counts, stable widget ids, step latencies."""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from course.roadmap import SPINE, exported_lines, you_are_here  # noqa: E402
from course.simulate import latency_in_steps, token_steps  # noqa: E402
from course.snapshots import stable_model_id, stable_widget_ids  # noqa: E402
from nanoserve.engine.scheduler import Scheduler, SchedulerConfig  # noqa: E402
from nanoserve.engine.sequence import Sequence  # noqa: E402
from nanoserve.kv.blocks import BlockManager  # noqa: E402

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"


def test_you_are_here_outlines_one_chapter_and_refuses_an_unknown_one():
    ax = you_are_here("03")
    labels = [t.get_text() for t in ax.texts]
    assert [c for c, _, _ in SPINE] == [t for t in labels if t.isdigit()]
    assert "you are here" in labels
    with pytest.raises(ValueError, match="chapter must be one of"):
        you_are_here("99")


def test_exported_lines_counts_each_generated_module_of_a_chapter():
    lines = exported_lines("03_paged_kv")
    assert set(lines) == {"nanoserve/checks.py", "nanoserve/kv/blocks.py", "nanoserve/attention/batch.py",
                          "nanoserve/attention/torch_ref.py"}
    root = Path(__file__).resolve().parents[2]
    assert all(n == len((root / m).read_text().splitlines()) for m, n in lines.items())
    assert exported_lines("00_tour") == {}


def test_stable_model_ids_are_stable_and_distinct():
    assert stable_model_id("03-pool-explorer", 2) == stable_model_id("03-pool-explorer", 2)
    assert stable_model_id("03-pool-explorer") != stable_model_id("04-chain-explorer")
    assert stable_model_id("03-pool-explorer", 0) != stable_model_id("03-pool-explorer", 1)
    with pytest.raises(ValueError):
        stable_model_id("")


@pytest.mark.parametrize("chapter, name", [("03_paged_kv", "03-pool-explorer"), ("04_prefix_cache", "04-chain-explorer"),
                                           ("05_scheduler", "05-scheduler-stepper")])
def test_a_saved_chapter_holds_the_state_of_the_widget_its_output_shows(chapter, name):
    """What a reopened notebook needs to draw the widget instead of 'model not found'."""
    nb = json.loads((CHAPTERS / f"{chapter}.ipynb").read_text())
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    shown = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for c in nb["cells"]
             for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    stable = {stable_model_id(name, i) for i in range(len(state))}
    assert len(shown) == 1 and shown[0] in stable and shown[0] in state
    assert sum(model in stable for model in state) >= 3  # the widget's children and layouts too


def test_token_steps_and_latency_in_steps():
    arrivals = {0: [Sequence(0, [1, 2, 3, 4], max_tokens=3)], 1: [Sequence(1, [5, 6], max_tokens=2)]}
    scheduler = Scheduler(SchedulerConfig(4, 16, 16), BlockManager(8, 4))
    records, when = token_steps(scheduler, arrivals)
    assert when == {0: [0, 1, 2], 1: [1, 2]}
    assert "schedule" not in vars(scheduler)  # the counting wrapper is gone afterwards
    assert latency_in_steps(arrivals, when) == {"mean_first_token": 0.0, "max_gap": 1}
    assert len(records) == 3


def test_widgets_made_under_a_name_get_the_same_ids_every_time():
    ipywidgets = pytest.importorskip("ipywidgets")

    def ids():
        with stable_widget_ids("test-widgets"):
            box = ipywidgets.VBox([ipywidgets.IntSlider(), ipywidgets.Button(description="go")])
        return [box.model_id] + [c.model_id for c in box.children]

    first = ids()
    assert ids() == first and len(set(first)) == 3
    assert ipywidgets.IntSlider().model_id not in first  # outside the block ids are random again
