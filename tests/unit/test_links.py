"""tools/links.py: previous/next navigation, links for named chapters, the widget hint, and its check."""
import subprocess
import sys
from pathlib import Path

import nbformat

from notebook_factory import numbers_chapter

TOOL = Path(__file__).resolve().parents[2] / "tools" / "links.py"
WIDGET = "import ipywidgets as widgets\nwidgets.IntSlider()"


def links(root: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `python tools/links.py ARGS` over the chapters under `root`."""
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=root, capture_output=True, text=True,
                          timeout=120, env={"NANOSERVE_ROOT": str(root), "PATH": ""})


def course(tmp_path: Path) -> list:
    """Three chapters: 01 names 02, itself and appendix A1 in prose, code, headings and links; 02 has a widget."""
    one = numbers_chapter(tmp_path, [
        ("md", "# 01 · One\n\nWhy. Chapter 02 builds on this chapter 01, and appendix\nA1 loads it."),
        ("md", "## Chapter 02 in a heading\n\nSee `chapter 02` in code, [chapter 02](02_old.ipynb) linked, "
               "[the next one](02_two.ipynb), chapter 99 and appendix A9."),
        ("code", "# chapter 02 in a comment\nprint(1)", "1\n")], name="01_one.ipynb")
    two = numbers_chapter(tmp_path, [("md", "# 02 · Two"), ("md", "Move the slider."), ("code", WIDGET, ""),
                                     ("code", WIDGET, "")], name="02_two.ipynb")
    app = numbers_chapter(tmp_path, [("md", "# A1 · Appendix"), ("code", WIDGET, "")], name="A1_app.ipynb")
    return [one, two, app]


def sources(path: Path) -> list:
    return [(c.get("id"), c.cell_type, c.source) for c in nbformat.read(str(path), as_version=4).cells]


def test_apply_links_navigation_mentions_and_hint_once(tmp_path):
    one, two, app = course(tmp_path)
    code_before = [c for c in sources(one) if c[1] == "code"]
    assert links(tmp_path, "check").returncode == 1
    assert links(tmp_path, "apply").returncode == 0

    cells = sources(one)
    nav = "[02 · two](02_two.ipynb) → <!-- nav: tools/links.py -->"
    assert cells[0][2].startswith(f"# 01 · One\n\n{nav}\n\nWhy. [Chapter 02](02_two.ipynb) builds on this chapter 01")
    assert "[appendix\nA1](A1_app.ipynb) loads it." in cells[0][2]
    assert cells[1][2] == ("## Chapter 02 in a heading\n\nSee `chapter 02` in code, [chapter 02](02_two.ipynb) "
                           "linked, [the next one](02_two.ipynb), chapter 99 and appendix A9.")
    assert [c for c in cells if c[1] == "code"] == code_before
    assert [c[0] for c in cells] == ["c000", "c001", "c002", "nav-bottom"] and cells[-1][2] == nav

    two_cells = sources(two)
    assert two_cells[1][2].endswith("Move the slider.\n\n*Widgets below come alive when you run the cells; "
                                    "a reopened notebook shows them as static pictures until you re-run.*")
    assert sum("Widgets below" in c[2] for c in two_cells) == 1
    assert two_cells[-1][2].startswith("← [01 · one](01_one.ipynb) · [A1 · app](A1_app.ipynb) →")
    app_cells = sources(app)  # the cell above the widget is the title: the hint gets a cell of its own
    assert [c[0] for c in app_cells] == ["c000", "widget-hint", "c001", "nav-bottom"]

    before = [p.read_text() for p in (one, two, app)]
    assert links(tmp_path, "apply").returncode == 0
    assert [p.read_text() for p in (one, two, app)] == before
    assert links(tmp_path, "check").returncode == 0


def test_check_names_a_stale_chapter_and_apply_takes_paths(tmp_path):
    one, two, app = course(tmp_path)
    links(tmp_path, "apply", str(one))
    assert links(tmp_path, "check", str(one)).returncode == 0
    out = links(tmp_path, "check")
    assert out.returncode == 1 and "02_two.ipynb" in out.stdout and "01_one.ipynb:" not in out.stdout
    links(tmp_path, "apply")
    (tmp_path / "chapters" / "A1_app.ipynb").rename(tmp_path / "chapters" / "A1_renamed.ipynb")
    out = links(tmp_path, "check")
    assert out.returncode == 1 and "02_two.ipynb" in out.stdout  # its next link points at the old name
    links(tmp_path, "apply")
    assert "[A1 · renamed](A1_renamed.ipynb)" in sources(two)[0][2]
    assert "[appendix\nA1](A1_renamed.ipynb)" in sources(one)[0][2]
