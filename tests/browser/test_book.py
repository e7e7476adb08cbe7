"""The rendered book (scripts/build_book.sh) in headless chromium, served from 127.0.0.1; and its build's checks."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labdriver import REPO, SHOTS, VIEWPORT, missing_browser, site_in_browser

BOOK_SRC = REPO / "book"
BOOK_HTML = Path(os.environ.get("BOOK_HTML") or REPO / "build" / "book" / "html")
BOOK_SHOTS = SHOTS / "book"
TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$")
GPU_TAGS = {"gpu", "multigpu"}


def chapter_notebooks():
    """Every chapter and appendix, in course order."""
    chapters = REPO / "chapters"
    return sorted(chapters.glob("[0-9][0-9]_*.ipynb")) + sorted(chapters.glob("A[0-9]_*.ipynb"))


def expected(nb_path):
    """What a chapter's page must show, counted from the committed notebook."""
    nb = json.loads(nb_path.read_text())
    images = gpu = widgets = tables = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            tables += sum(bool(TABLE_RULE.match(l)) for l in "".join(cell["source"]).splitlines())
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            images += "image/png" in data
            widgets += "application/vnd.jupyter.widget-view+json" in data and "image/png" in data
        gpu += bool(GPU_TAGS & set(cell.get("metadata", {}).get("tags", [])))
    return {"images": images, "gpu": gpu, "widgets": widgets, "tables": tables}


def sphinx_missing():
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
        import sphinx_book_theme  # noqa: F401
    except ImportError as exc:
        return f"the book extra is not installed ({exc.name}): pip install -e '.[book]'"
    return None


def require(reason):
    """Fail under CI, skip elsewhere, when something the test needs is missing."""
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the book test must run under CI but cannot: {reason}")
        pytest.skip(reason)


def sphinx_build(src, out):
    """Run the book's sphinx-build as scripts/build_book.sh does; return (exit status, output)."""
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(src), str(out)], capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def site():
    """(site, browser) for the built book; builds it first when build/book/html is missing or older than its sources."""
    require(missing_browser())
    index = BOOK_HTML / "index.html"
    sources = [*chapter_notebooks(), *BOOK_SRC.rglob("*.*"), *(REPO / "figures").glob("*.*")]
    if not index.is_file() or any(p.stat().st_mtime > index.stat().st_mtime for p in sources):
        require(sphinx_missing())
        shutil.rmtree(BOOK_HTML, ignore_errors=True)
        rc, log = sphinx_build(BOOK_SRC, BOOK_HTML)
        assert rc == 0, f"the book did not build:\n{log[-3000:]}"
    BOOK_SHOTS.mkdir(parents=True, exist_ok=True)
    with site_in_browser(BOOK_HTML) as site_and_browser:
        yield site_and_browser


@pytest.fixture
def page(site):
    """A fresh page that records every request leaving 127.0.0.1 (the book must work offline)."""
    server, browser = site
    page = browser.new_page(viewport=VIEWPORT)
    page.outside = []
    page.on("request", lambda r: r.url.startswith(server.url()) or r.url.startswith("data:")
            or page.outside.append(r.url))
    page.route(re.compile(r"^(?!http://127\.0\.0\.1).*"), lambda route: route.abort())
    yield page
    page.close()


def shoot(page, name):
    """Save a screenshot of what the viewport shows into .browser_screenshots/book/."""
    page.screenshot(path=str(BOOK_SHOTS / f"{name}.png"))


def open_page(page, server, path):
    """Load a page of the book and wait for it, failing on a bad status."""
    response = page.goto(server.url(path), wait_until="load")
    assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"


@pytest.mark.parametrize("nb_path", chapter_notebooks(), ids=lambda p: p.stem)
def test_chapter_page_shows_the_committed_notebook(site, page, nb_path):
    server, _ = site
    want = expected(nb_path)
    open_page(page, server, f"chapters/{nb_path.stem}.html")
    main = page.locator("main#main-content, div.bd-content").first
    text = main.inner_text()
    assert page.locator("article h1").count() == 1, f"{nb_path.name}: not one chapter title"
    assert "interactive(children=" not in text, f"{nb_path.name}: a widget shows as its text repr"
    assert "Traceback (most recent call last)" not in text and page.locator(".output.traceback").count() == 0
    # figures: every committed picture is an <img> that loaded
    imgs = page.locator("div.cell_output img")
    assert imgs.count() == want["images"], f"{nb_path.name}: {imgs.count()} images, notebook has {want['images']}"
    broken = page.evaluate("""() => [...document.querySelectorAll('div.cell_output img')]
        .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)""")
    assert not broken, f"{nb_path.name}: images that did not load: {broken}"
    # Markdown tables rendered as tables (cell outputs hold no HTML tables)
    assert page.locator("article table").count() >= want["tables"], f"{nb_path.name}: a Markdown table did not render"
    # the run box, its download link answering, and a marked recording per GPU cell
    box = page.locator(".run-this-notebook")
    assert box.count() == 1 and f"jupyter lab chapters/{nb_path.name}" in box.inner_text()
    href = box.locator("a.notebook-link").get_attribute("href")
    assert href == nb_path.name
    assert page.request.get(server.url(f"chapters/{href}")).ok, f"{nb_path.name}: run link is broken"
    recordings = page.locator(".gpu-recording")
    assert recordings.count() == want["gpu"]
    for i in range(recordings.count()):
        note = recordings.nth(i).inner_text()
        assert re.search(r"recorded on .+ on \d{4}-\d{2}-\d{2}", note), f"{nb_path.name}: {note!r}"
    assert page.locator(".widget-snapshot").count() == want["widgets"]
    assert not page.outside, f"{nb_path.name}: requests left 127.0.0.1: {page.outside}"
    shoot(page, f"{nb_path.stem}-top")
    if want["gpu"]:
        recordings.first.scroll_into_view_if_needed()
        shoot(page, f"{nb_path.stem}-gpu-recording")
    if want["images"]:
        imgs.first.scroll_into_view_if_needed()
        shoot(page, f"{nb_path.stem}-figure")


def test_landing_page_lists_the_chapters_in_order_with_their_figures(site, page):
    server, _ = site
    open_page(page, server, "index.html")
    links = page.evaluate("""() => [...document.querySelectorAll('.toctree-wrapper a.reference.internal')]
        .map(a => a.getAttribute('href'))""")
    assert [Path(h.split("#")[0]).stem for h in links] == [p.stem for p in chapter_notebooks()]
    gallery = page.locator(".key-figures img")
    assert gallery.count() >= len([p for p in chapter_notebooks() if p.name[0].isdigit()])
    assert page.evaluate("() => [...document.querySelectorAll('.key-figures img')].every(i => i.naturalWidth > 0)")
    assert not page.outside
    shoot(page, "index-top")
    gallery.first.scroll_into_view_if_needed()
    shoot(page, "index-figures")


def test_search_works_offline(site, page):
    server, _ = site
    open_page(page, server, "search.html?q=preemption")
    page.wait_for_selector("#search-results li", timeout=30_000)
    hits = page.evaluate("() => [...document.querySelectorAll('#search-results li a')].map(a => a.href)")
    assert any("05_scheduler" in h for h in hits), hits
    assert not page.outside
    shoot(page, "search")


def mini_book(tmp_path, markdown):
    """A copy of book/ with one chapter of one Markdown cell, one empty appendix and a one-figure gallery."""
    src = tmp_path / "book"
    shutil.copytree(BOOK_SRC, src, symlinks=False, ignore=shutil.ignore_patterns("chapters", "figures"))
    (src / "chapters").mkdir()
    nb = {"cells": [{"cell_type": "markdown", "id": "c000", "metadata": {}, "source": markdown}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (src / "chapters" / "00_mini.ipynb").write_text(json.dumps(nb))
    appendix = dict(nb, cells=[dict(nb["cells"][0], source="# A1 · Mini appendix\n")])
    (src / "chapters" / "A1_mini.ipynb").write_text(json.dumps(appendix))
    (src / "figures").mkdir()
    shutil.copy(REPO / "figures" / "00_tour.png", src / "figures" / "00_tour.png")
    (src / "figures" / "figures.toml").write_text(
        '[[figure]]\nchapter = "00_mini.ipynb"\ncell = "c000"\ncontains = "#"\nname = "00_tour.png"\n')
    return src


@pytest.mark.parametrize("broken, says", [
    ("| a | b |\n|---|---|\n| 1 | 2 |\n", None),
    ("text right above\n|---|---|\n| 1 | 2 |\n", "Markdown table did not render"),
    ("![a figure](missing.png)\n", "missing.png"),
    ("see [the scheduler](05_nowhere.ipynb)\n", "05_nowhere"),
], ids=["good-table", "unrendered-table", "missing-figure", "broken-cross-reference"])
def test_build_fails_on_a_broken_page(tmp_path, broken, says):
    require(sphinx_missing())
    src = mini_book(tmp_path, f"# 00 · Mini\n\n{broken}")
    rc, log = sphinx_build(src, tmp_path / "html")
    if says is None:
        assert rc == 0, log
    else:
        assert rc != 0 and says in log, log


def nanobook():
    """book/_ext/nanobook.py, the book's Sphinx extension (imports only docutils and Sphinx)."""
    require(sphinx_missing())
    sys.path.insert(0, str(BOOK_SRC / "_ext"))
    try:
        import nanobook as module
    finally:
        sys.path.pop(0)
    return module


def test_a_chapter_gets_its_run_box_recording_boxes_and_clean_code(tmp_path):
    ext = nanobook()
    (tmp_path / "recordings").mkdir()
    (tmp_path / "recordings" / "07_x.json").write_text(json.dumps({"chapter": "07_x", "cells": {"kv": {
        "needs_gpus": 1, "device": "an NVIDIA H200", "recorded": "2026-11-30",
        "command": "python scripts/gpu/run_gpu_cells.py chapters/07_x.ipynb", "source": "", "outputs": []}}}))
    bar = {"output_type": "display_data", "metadata": {}, "data": {
        "application/vnd.jupyter.widget-view+json": {"model_id": "m"},
        "text/plain": "Loading weights:   0%|          | 0/24 [00:00<?, ?it/s]"}}
    nb = {"cells": [
        {"cell_type": "markdown", "id": "c000", "metadata": {}, "source": "# 07 · X\n\nWhy it matters."},
        {"cell_type": "code", "id": "c001", "metadata": {}, "outputs": [],
         "source": 'replay_gpu_cells("recordings/07_x.json")'},
        {"cell_type": "code", "id": "c002", "metadata": {"tags": ["gpu"]}, "outputs": [],
         "source": '# GPU cell (needs 1 CUDA GPU): recording "kv"\n# NBVAL_IGNORE_OUTPUT\nx = 1\n'},
        {"cell_type": "code", "id": "c003", "metadata": {}, "outputs": [bar], "source": "LLM(tiny)\n"},
    ]}
    cells = ext.prepare_chapter(nb, "07_x.ipynb", tmp_path)["cells"]
    title = cells[0]["source"]
    assert title.startswith("# 07 · X\n") and title.endswith("Why it matters.")
    assert 'href="07_x.ipynb"' in title and ".venv/bin/jupyter lab chapters/07_x.ipynb" in title
    box, gpu_cell = cells[2], cells[3]
    assert box["cell_type"] == "markdown" and box["id"] == "book-gpu-2"
    assert "an NVIDIA H200, 2026-11-30" in box["source"] and "run_gpu_cells.py chapters/07_x.ipynb" in box["source"]
    assert "NBVAL" not in gpu_cell["source"] and gpu_cell["source"].startswith("# GPU cell")
    assert cells[4]["outputs"] == []  # the frozen progress bar
    assert nb["cells"][2]["source"].count("NBVAL") == 1  # the committed notebook is left alone


def test_a_gpu_cell_without_its_recording_is_a_build_warning(tmp_path, caplog):
    ext = nanobook()
    nb = {"cells": [{"cell_type": "code", "id": "c000", "metadata": {"tags": ["gpu"]}, "outputs": [],
                     "source": '# GPU cell (needs 2 CUDA GPUs): recording "gone"\n'}]}
    with caplog.at_level("WARNING"):
        cells = ext.prepare_chapter(nb, "10_x.ipynb", tmp_path)["cells"]
    assert "needs 2 CUDA GPUs; its recording `gone` is missing" in cells[1]["source"]
    assert "has no recording 'gone'" in caplog.text
