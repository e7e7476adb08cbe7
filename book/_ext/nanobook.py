"""Sphinx extension for the nanoserve book: run links, marked GPU recordings, figure gallery, table check.

Everything here works on the committed notebooks as they are read (nothing is executed): a "run this
notebook" box under each chapter's title; above each GPU cell, a box naming the device, date and command
of its recorded output; a caption above each widget's first-state picture; no nbval directives in the
code and no frozen progress bars; a gallery of the key figures (figures/figures.toml) for the landing
page; a warning for any Markdown table that did not render; and a copy of each notebook beside its page,
so the run link downloads it.
"""
import json
import re
import shutil
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

GPU_TAGS = {"gpu": 1, "multigpu": 2}
GPU_MARKER = re.compile(r'^# GPU cell \(needs (\d+) CUDA GPUs?\): recording "([\w.-]+)"')
REPLAY_CALL = re.compile(r'replay_gpu_cells\(\s*["\']([^"\']+)["\']')
NBVAL_LINE = re.compile(r"^# NBVAL_\w+[ \t]*\n", re.M)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
PROGRESS_BAR = re.compile(r"^[^\n|]*\d+%\|[^\n]*\|\s*\d+/\d+")
# a table's rule row as it reads in a paragraph, after Sphinx's smart quotes made `---` an em dash
TABLE_RULE = re.compile(r"^\s*\|?\s*:?[-\u2013\u2014]+:?\s*(\|\s*:?[-\u2013\u2014]+:?\s*)+\|?\s*$")


def _text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _markdown_cell(text: str, cell_id: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def run_box(name: str) -> str:
    """The MyST admonition that tells a reader how to run this chapter."""
    return (f"\n\n:::{{admonition}} Run this notebook\n:class: tip run-this-notebook\n"
            f"This page is the committed notebook, rendered without running it. Download "
            f'<a class="notebook-link" href="{name}" download><code>{name}</code></a>, or from a clone of '
            f"the repository open it in JupyterLab:\n\n"
            f"```bash\nbash scripts/setup.sh\n.venv/bin/jupyter lab chapters/{name}\n```\n:::\n\n")


def recording_box(needs: int, name: str, cell: dict | None, recordings_file: str) -> str:
    """The admonition above a GPU cell: what ran where and when; the output below is that recording."""
    gpus = "one CUDA GPU" if needs == 1 else f"{needs} CUDA GPUs"
    if cell is None:
        return (f":::{{admonition}} GPU recording\n:class: gpu-recording\n"
                f"The next cell needs {gpus}; its recording `{name}` is missing from `{recordings_file}`.\n:::\n")
    return (f":::{{admonition}} GPU recording: {cell['device']}, {cell['recorded']}\n:class: gpu-recording\n"
            f"The next cell needs {gpus}. Its output below was recorded on {cell['device']} on "
            f"{cell['recorded']}; a machine without the GPU replays it (`{recordings_file}`, "
            f"recording \"{name}\"). Recorded with:\n\n```bash\n{cell['command']}\n```\n:::\n")


WIDGET_NOTE = (":::{admonition} Interactive widget\n:class: widget-snapshot\n"
               "The picture under the next cell is the widget's first state; run the notebook to use "
               "its controls.\n:::\n")


def is_progress_bar(output: dict) -> bool:
    """A tqdm widget: saved as its first frame (0%), which on a static page only looks stuck."""
    data = output.get("data", {})
    text = _text(data.get("text/plain", ""))
    return WIDGET_VIEW in data and "image/png" not in data and bool(PROGRESS_BAR.match(text))


def prepare_chapter(nb: dict, name: str, chapters_dir: Path) -> dict:
    """The notebook with the book's boxes added (run link, GPU recordings, widget snapshots)."""
    cells = nb.get("cells", [])
    recordings_file, recordings = None, {}
    for cell in cells:
        match = REPLAY_CALL.search(_text(cell.get("source", ""))) if cell.get("cell_type") == "code" else None
        if match:
            recordings_file = match.group(1)
            path = chapters_dir / recordings_file
            if path.is_file():
                recordings = json.loads(path.read_text()).get("cells", {})
            break
    out = []
    for i, cell in enumerate(cells):
        source = _text(cell.get("source", ""))
        if cell.get("cell_type") == "code":
            if NBVAL_LINE.search(source):  # a test-harness directive, noise to a reader
                cell = dict(cell, source=NBVAL_LINE.sub("", source))
            marker = GPU_MARKER.match(source.lstrip("\n"))
            tags = set(cell.get("metadata", {}).get("tags", []))
            if marker or tags & set(GPU_TAGS):
                needs = int(marker.group(1)) if marker else max(GPU_TAGS[t] for t in tags & set(GPU_TAGS))
                rec_name = marker.group(2) if marker else "?"
                if rec_name not in recordings:
                    logger.warning(f"{name}: GPU cell {cell.get('id')} has no recording {rec_name!r} in "
                                   f"{recordings_file or 'chapters/recordings/'}", type="nanobook", subtype="recording")
                box = recording_box(needs, rec_name, recordings.get(rec_name), recordings_file or "recordings/")
                out.append(_markdown_cell(box, f"book-gpu-{i}"))
            elif any(WIDGET_VIEW in o.get("data", {}) and "image/png" in o.get("data", {})
                     for o in cell.get("outputs", [])):
                out.append(_markdown_cell(WIDGET_NOTE, f"book-widget-{i}"))
            outputs = [o for o in cell.get("outputs", []) if not is_progress_bar(o)]
            if len(outputs) != len(cell.get("outputs", [])):
                cell = dict(cell, outputs=outputs)
        out.append(cell)
    nb = dict(nb, cells=out)
    for cell in out:  # the run box goes right under the chapter's title
        if cell.get("cell_type") == "markdown":
            text = _text(cell["source"])
            lines = text.split("\n")
            for j, line in enumerate(lines):
                if line.startswith("# "):
                    cell["source"] = "\n".join(lines[: j + 1]) + run_box(name) + "\n".join(lines[j + 1:])
                    return nb
            break
    out.insert(0, _markdown_cell(run_box(name), "book-run"))
    return nb


CHAPTER_LINK = re.compile(r"\[([^\]`<>]+)\]\(((?:\d\d|A\d)_\w+)\.ipynb\)")


def doc_links(text: str) -> str:
    """Markdown links between chapter notebooks as Sphinx {doc} references: myst resolves a relative `.ipynb`
    path through chapters/'s symlink to a file outside the book and cannot find it."""
    return CHAPTER_LINK.sub(lambda m: f"{{doc}}`{m.group(1)} <{m.group(2)}>`", text)


def on_source_read(app, docname, source):
    """Add the book's boxes to a chapter notebook as Sphinx reads it."""
    if not docname.startswith("chapters/"):
        return
    path = Path(app.env.doc2path(docname))
    if path.suffix != ".ipynb":
        return
    nb = json.loads(source[0])
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            cell["source"] = doc_links(_text(cell["source"]))
    source[0] = json.dumps(prepare_chapter(nb, path.name, path.parent))


def on_doctree_read(app, doctree):
    """Warn (an error under -W) about Markdown tables left as paragraphs of pipes."""
    for para in doctree.findall(nodes.paragraph):
        if any(TABLE_RULE.match(line) for line in para.astext().splitlines()):
            logger.warning("a Markdown table did not render (check its header row and column count)",
                           location=para, type="nanobook", subtype="table")


def on_build_finished(app, exception):
    """Copy every chapter notebook beside its page, so the run link downloads it."""
    if exception is not None or app.builder.format != "html":
        return
    for docname in app.env.found_docs:
        path = Path(app.env.doc2path(docname))
        if docname.startswith("chapters/") and path.suffix == ".ipynb":
            target = Path(app.outdir) / "chapters" / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)


def chapter_title(path: Path) -> str:
    """A chapter's first `# ` heading, or its file name."""
    for cell in json.loads(path.read_text()).get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in _text(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


class KeyFigures(SphinxDirective):
    """`{key-figures}`: each chapter's key figure from figures/figures.toml, linked to its chapter."""

    def run(self):
        import tomllib

        src = Path(self.env.srcdir)
        mapping = tomllib.loads((src / "figures" / "figures.toml").read_text())["figure"]
        lines = [":::::{container} key-figures", ""]
        for entry in mapping:
            chapter = src / "chapters" / entry["chapter"]
            title = (chapter_title(chapter) if chapter.is_file() else entry["chapter"]).replace("`", "")
            lines += [f":::{{figure}} /figures/{entry['name']}", f":alt: key figure of {title}", "",
                      f"{{doc}}`/chapters/{Path(entry['chapter']).stem}`", ":::", ""]
        lines += [":::::"]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source="figures/figures.toml"), self.content_offset, container)
        return container.children


def setup(app):
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", on_doctree_read)
    app.connect("build-finished", on_build_finished)
    app.add_directive("key-figures", KeyFigures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
