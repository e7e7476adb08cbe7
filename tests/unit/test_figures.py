"""figures/: each chapter's key figure, taken from its notebook's output by cell id (tools/figures.py)."""
import base64
import importlib.util
import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("figures_tool", REPO / "tools" / "figures.py")
figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(figures)


def png(width=40, height=30, colour=(255, 255, 255), dots=()):
    """A PNG of one colour with a few black pixels."""
    pix = np.full((height, width, 3), colour, dtype=np.uint8)
    for x, y in dots:
        pix[y, x] = 0
    buf = io.BytesIO()
    Image.fromarray(pix).save(buf, format="PNG")
    return buf.getvalue()


def notebook(*cells):
    """A notebook of code cells given as (id, source, [png bytes, ...])."""
    return {"cells": [{"cell_type": "code", "id": cid, "metadata": {}, "source": src, "outputs": [
        {"output_type": "display_data", "metadata": {},
         "data": {"image/png": base64.b64encode(p).decode(), "text/plain": "<Figure>"}} for p in pngs]}
        for cid, src, pngs in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


FIG = figures.Figure(chapter="05_x.ipynb", cell="c002", contains="def draw():", name="05_x.png")


def test_committed_figures_match_their_chapters_outputs():
    problems = figures.check()
    assert not problems, "\n".join(problems)


def test_every_numbered_chapter_has_a_key_figure_in_figures():
    mapped = {f.chapter for f in figures.load_mapping()}
    numbered = {p.name for p in (REPO / "chapters").glob("[0-9][0-9]_*.ipynb")}
    assert numbered <= mapped
    assert all((REPO / "figures" / f.name).is_file() for f in figures.load_mapping())


def test_a_changed_drawing_is_reported_and_a_missing_figure_too(tmp_path):
    chapters, out = tmp_path / "chapters", tmp_path / "figures"
    chapters.mkdir(), out.mkdir()
    (chapters / "05_x.ipynb").write_text(json.dumps(notebook(("c002", "def draw():\n", [png()]))))
    assert figures.check(out, chapters, [FIG]) == ["05_x.png: missing; run `python tools/figures.py export`"]
    (out / "05_x.png").write_bytes(png(colour=(0, 0, 255)))
    [problem] = figures.check(out, chapters, [FIG])
    assert "differs from 05_x.ipynb cell c002" in problem
    (out / "05_x.png").write_bytes(png(dots=[(3, 4)]))  # one pixel of anti-aliasing noise
    assert figures.check(out, chapters, [FIG]) == []


def test_a_chapter_without_a_figure_fails_the_check(tmp_path):
    (tmp_path / "06_y.ipynb").write_text(json.dumps(notebook()))
    assert figures.check(tmp_path, tmp_path, [FIG]) == [
        "06_y.ipynb: no key figure in figures/figures.toml", "05_x.png: chapter 05_x.ipynb does not exist"]


def test_a_cell_inserted_above_is_named_in_the_error():
    moved = notebook(("c002", "print('new cell')\n", []), ("c003", "def draw():\n    pass\n", [png()]))
    with pytest.raises(ValueError, match="that line is now in cell c003"):
        figures.figure_png(moved, FIG)
    with pytest.raises(ValueError, match="no cell holds that line any more"):
        figures.figure_png(notebook(("c002", "x = 1\n", [])), FIG)
    with pytest.raises(ValueError, match="has 0 image output"):
        figures.figure_png(notebook(("c002", "def draw():\n", [])), FIG)


def test_image_index_picks_one_of_several_outputs():
    nb = notebook(("c002", "def draw():\n", [png(), png(width=50)]))
    second = figures.Figure(**{**FIG.__dict__, "image": 1})
    assert figures.pixels(figures.figure_png(nb, second)).shape == (30, 50, 4)


def test_export_writes_only_what_changed(tmp_path):
    nb_path = tmp_path / "run" / "05_x.ipynb"  # the course run's executed copy
    nb_path.parent.mkdir()
    nb_path.write_text(json.dumps(notebook(("c002", "def draw():\n", [png()]))))
    out = tmp_path / "figures"
    assert figures.export(nb_path, out, [FIG]) == [("05_x.png", "new")]
    first = (out / "05_x.png").read_bytes()
    nb_path.write_text(json.dumps(notebook(("c002", "def draw():\n", [png(dots=[(1, 1)])]))))
    assert figures.export(nb_path, out, [FIG]) == [("05_x.png", "same")]
    assert (out / "05_x.png").read_bytes() == first  # noise alone leaves the committed bytes alone
    nb_path.write_text(json.dumps(notebook(("c002", "def draw():\n", [png(colour=(9, 9, 9))]))))
    assert figures.export(nb_path, out, [FIG]) == [("05_x.png", "changed")]
    assert (out / "05_x.png").read_bytes() != first


def test_course_run_check_says_what_to_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "load_mapping", lambda path=None: [FIG])
    nb_path = tmp_path / "copy.ipynb"
    nb_path.write_text(json.dumps(notebook(("c002", "def draw():\n", [png()]))))
    out = tmp_path / "figures"
    [message] = figures.course_run_check(nb_path, "05_x.ipynb", out)
    assert "05_x.png was missing; rewritten from 05_x.ipynb's fresh run: commit it" in message
    assert figures.course_run_check(nb_path, "05_x.ipynb", out) == []
    nb_path.write_text(json.dumps(notebook(("c009", "other\n", []))))
    [message] = figures.course_run_check(nb_path, "05_x.ipynb", out)
    assert "cell c002 does not hold 'def draw():'" in message


def test_images_of_another_size_or_drawing_differ():
    assert figures.same_figure(png(), png())
    assert not figures.same_figure(png(), png(width=41))
    assert not figures.same_figure(png(), png(dots=[(x, y) for x in range(10) for y in range(10)]))


@pytest.mark.parametrize("toml, says", [
    ("", "no [[figure]] entries"),
    ('[[figure]]\nchapter = "05_x.ipynb"\ncell = "c1"\nname = "05_x.png"\n', "missing ['contains']"),
    ('[[figure]]\nchapter = "05_x.ipynb"\ncell = "c1"\ncontains = "a"\nname = "5x.png"\n', "must be 05_<name>.png"),
    ('[[figure]]\nchapter = "05_x.ipynb"\ncell = "c1"\ncontains = "a"\nname = "05_x.png"\ncolour = 1\n',
     "unknown ['colour']"),
    ('[[figure]]\nchapter = "05_x.ipynb"\ncell = "c1"\ncontains = "a"\nname = "05_x.png"\n' * 2, "used twice"),
])
def test_a_bad_mapping_is_refused_with_what_is_wrong(tmp_path, toml, says):
    path = tmp_path / "figures.toml"
    path.write_text(toml)
    with pytest.raises(ValueError, match=says.replace("[", r"\[").replace("(", r"\(")):
        figures.load_mapping(path)


def test_retarget_follows_a_cell_that_moved_and_keeps_the_comments(tmp_path):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    moved = notebook(("c002", "print('new cell')\n", []), ("c003", "def draw():\n", [png()]))
    (chapters / "05_x.ipynb").write_text(json.dumps(moved))
    toml = tmp_path / "figures.toml"
    toml.write_text('# the key figures\n[[figure]]\nchapter = "05_x.ipynb"\ncell = "c002"\n'
                    'contains = "def draw():"\nname = "05_x.png"\n')
    assert figures.retarget(toml, chapters) == ["05_x.png: 05_x.ipynb cell c002 -> c003"]
    assert toml.read_text().startswith("# the key figures\n")
    [fig] = figures.load_mapping(toml)
    assert fig.cell == "c003" and figures.figure_png(moved, fig) == png()
    assert figures.retarget(toml, chapters) == []
