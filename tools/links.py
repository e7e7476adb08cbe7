"""Chapter navigation and hints: previous/next links, links for the chapters a chapter names, the widget hint.

`apply [paths]` rewrites the chapters given (all of them when none is), `check` fails when any chapter's
links or hint are missing or stale. Only Markdown cells change: no code cell, no output, no existing cell id.
* The top navigation line sits in the title cell, under the `# ` heading, so no cell moves and the ids that
  nb.py build gives by position (and figures/figures.toml names) stay put; the bottom one is the last cell.
* "chapter 11", "Chapter 07", "appendix A5" in Markdown prose become links to that notebook; headings, code
  spans, code blocks, links, HTML and math are left alone, and a chapter does not link to itself.
* The Markdown right above a chapter's first widget cell ends with one line saying widgets come alive on a re-run.
"""
import argparse
import os
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(os.environ.get("NANOSERVE_ROOT") or Path(__file__).resolve().parent.parent).resolve()
CHAPTERS = ROOT / "chapters"
NAV_MARK = "<!-- nav: tools/links.py -->"
BOTTOM_ID = "nav-bottom"
HINT_ID = "widget-hint"
HINT = ("*Widgets below come alive when you run the cells; a reopened notebook shows them as static pictures "
        "until you re-run.*")
WIDGET_CELL = re.compile(r"^\s*(?:import ipywidgets|from ipywidgets\b)|\binteract(?:ive)?\(", re.M)
MENTION = re.compile(r"\b([Cc]hapter|[Aa]ppendix)(\s+)(A\d|\d{1,2})\b")
OWN_LINK = re.compile(r"\[([Cc]hapter|[Aa]ppendix)(\s+)(A\d|\d{1,2})\]\(([^)\s]*\.ipynb)\)")
# regions a mention inside is never linked: code blocks and spans, links and images, HTML, math, headings
PROTECTED = re.compile(r"```[\s\S]*?```|~~~[\s\S]*?~~~|(`+)[\s\S]*?\1|!?\[[^\]]*\]\([^)]*\)|<[^>\n]*>"
                       r"|\$\$[\s\S]*?\$\$|\$[^$\n]+\$|^#{1,6}\s[^\n]*$", re.M)


def chapter_paths(chapters: Path = CHAPTERS) -> list:
    """Every chapter notebook, in course order (as tools/nb.py orders them)."""
    return sorted(Path(chapters).glob("[0-9][0-9]_*.ipynb")) + sorted(Path(chapters).glob("A[0-9]_*.ipynb"))


def label(path: Path) -> str:
    """`05 · scheduler` for chapters/05_scheduler.ipynb."""
    number, _, name = path.stem.partition("_")
    return f"{number} · {name.replace('_', ' ')}"


def nav_line(order: list, path: Path) -> str:
    """`← [04 · …](04_….ipynb) · [06 · …](06_….ipynb) →` with the marker that finds it again."""
    i = [p.name for p in order].index(path.name)
    parts = []
    if i > 0:
        parts.append(f"← [{label(order[i - 1])}]({order[i - 1].name})")
    if i + 1 < len(order):
        parts.append(f"[{label(order[i + 1])}]({order[i + 1].name}) →")
    return " · ".join(parts) + " " + NAV_MARK


def _key(number: str) -> str:
    """The file prefix a mention names: `A5`, or a chapter number written with two digits."""
    return number if number.startswith("A") else f"{int(number):02d}"


def link_mentions(text: str, names: dict, own: str) -> str:
    """Markdown `text` with every plain chapter or appendix mention linked and every such link's target current."""
    def retarget(m):
        name = names.get(_key(m.group(3)))
        return f"[{m.group(1)}{m.group(2)}{m.group(3)}]({name})" if name else m.group(0)

    def link(m):
        if (m.group(1).lower() == "appendix") != m.group(3).startswith("A"):
            return m.group(0)
        key = _key(m.group(3))
        if key == own or key not in names:
            return m.group(0)
        return f"[{m.group(0)}]({names[key]})"

    text = OWN_LINK.sub(retarget, text)
    out, pos = [], 0
    for m in PROTECTED.finditer(text):
        out += [MENTION.sub(link, text[pos:m.start()]), m.group(0)]
        pos = m.end()
    return "".join(out + [MENTION.sub(link, text[pos:])])


def _without_nav(text: str) -> str:
    """A title cell's text with its navigation paragraph taken out."""
    return re.sub(r"\n*^.*" + re.escape(NAV_MARK) + r"[ \t]*$", "", text, flags=re.M)


def _without_hint(text: str) -> str:
    """A Markdown cell's text with the widget hint taken out."""
    return text.replace("\n\n" + HINT, "").replace(HINT, "").rstrip("\n") if HINT in text else text


def refresh(nb, path: Path, order: list) -> None:
    """Put `nb` (the chapter at `path`) in the state `apply` leaves it: navigation, mention links, hint."""
    names = {p.stem.partition("_")[0]: p.name for p in order}
    own = path.stem.partition("_")[0]
    nav = nav_line(order, path)

    def is_nav(c):
        return c.cell_type == "markdown" and c.source.strip().endswith(NAV_MARK) and "\n" not in c.source.strip()

    def is_hint(c):
        return c.cell_type == "markdown" and c.source.strip() == HINT

    bottom = next((c for c in nb.cells if is_nav(c)), None) or _markdown(nav, BOTTOM_ID, nb)
    hint = next((c for c in nb.cells if is_hint(c)), None) or _markdown(HINT, HINT_ID, nb)
    cells = [c for c in nb.cells if not (is_nav(c) or is_hint(c))]
    for c in cells:
        if c.cell_type == "markdown":
            c.source = link_mentions(_without_hint(_without_nav(c.source)), names, own)
    title = cells[0] if cells else None
    if title is not None and title.cell_type == "markdown" and title.source.startswith("# "):
        head, _, rest = title.source.partition("\n")
        title.source = head + "\n\n" + nav + ("\n\n" + rest.lstrip("\n") if rest.strip() else "")
    widget = next((i for i, c in enumerate(cells) if c.cell_type == "code" and WIDGET_CELL.search(c.source)), None)
    if widget is not None:
        above = cells[widget - 1]
        if above.cell_type == "markdown" and widget - 1 > 0:
            above.source = above.source.rstrip("\n") + "\n\n" + HINT
        else:
            cells.insert(widget, hint)
    bottom.source = nav
    nb.cells = cells + [bottom]


def _markdown(text: str, cell_id: str, nb):
    """A new Markdown cell with a fixed id (nbformat gives 4.5+ notebooks' cells ids)."""
    cell = nbformat.v4.new_markdown_cell(text)
    if nb.nbformat_minor >= 5:
        cell["id"] = cell_id
    else:
        cell.pop("id", None)
    return cell


def stale(paths: list, order: list) -> list:
    """The chapters among `paths` whose navigation, links or hint `apply` would change."""
    out = []
    for path in paths:
        before = nbformat.writes(nbformat.read(str(path), as_version=4))
        nb = nbformat.reads(before, as_version=4)
        refresh(nb, path, order)
        if nbformat.writes(nb) != before:
            out.append(path)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("apply", help="add or refresh navigation, mention links and the widget hint")
    a.add_argument("paths", nargs="*", type=Path, help="chapter notebooks (default: every chapter)")
    c = sub.add_parser("check", help="fail if any chapter's navigation, links or hint is missing or stale")
    c.add_argument("paths", nargs="*", type=Path, help="chapter notebooks (default: every chapter)")
    args = ap.parse_args(argv)
    order = chapter_paths()
    paths = [p.resolve() for p in args.paths] or order
    if args.cmd == "apply":
        for path in paths:
            nb = nbformat.read(str(path), as_version=4)
            before = nbformat.writes(nb)
            refresh(nb, path, order)
            if nbformat.writes(nb) != before:
                nbformat.write(nb, str(path))
                print("linked", path.name)
        return 0
    bad = stale(paths, order)
    for path in bad:
        print(f"{path.name}: navigation, chapter links or widget hint missing or stale "
              f"(run: python tools/links.py apply chapters/{path.name})")
    print(f"links: {len(paths)} chapters, {len(bad)} stale")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
