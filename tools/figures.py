"""Each chapter's key figure: taken from a notebook's outputs by cell id into figures/, and compared with it.

    python tools/figures.py export [NOTEBOOK ...] [--out DIR]   write the mapped figures (default: every chapter)
    python tools/figures.py check [--out DIR]                   figures/ against the committed notebooks' outputs
    python tools/figures.py retarget                            move entries to the cells now holding their line

figures/figures.toml names, for each chapter, the cell whose output is its key figure. Chapter cell ids
are positional (`c017`), so each entry also quotes a line of that cell's source (`contains`): when a
cell is inserted above it, the entry fails loudly and says which cell now holds that line.
"""
import argparse
import base64
import io
import json
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIGURES = REPO / "figures"
CHAPTERS = REPO / "chapters"
MAPPING = FIGURES / "figures.toml"
# Two renderings count as the same figure when they have one size and at most this share of pixels
# differs by more than PIXEL_TOLERANCE in some channel (anti-aliasing noise, not a changed drawing).
PIXEL_TOLERANCE = 16
MAX_CHANGED_SHARE = 0.001


@dataclass(frozen=True)
class Figure:
    """One mapping entry: chapter notebook, cell id, a source line of that cell, output file, image index."""

    chapter: str
    cell: str
    contains: str
    name: str
    image: int = 0


def load_mapping(path: Path = MAPPING) -> list:
    """The entries of figures.toml, checked for shape; ValueError names a bad entry."""
    data = tomllib.loads(Path(path).read_text())
    entries = data.get("figure")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: no [[figure]] entries")
    figures, names = [], set()
    for i, entry in enumerate(entries):
        missing = {"chapter", "cell", "contains", "name"} - set(entry)
        unknown = set(entry) - {"chapter", "cell", "contains", "name", "image"}
        if missing or unknown:
            raise ValueError(f"{path}: figure {i}: missing {sorted(missing)}, unknown {sorted(unknown)}")
        fig = Figure(**entry)
        stem = Path(fig.chapter).stem
        number = stem.split("_", 1)[0]
        if not fig.name.startswith(number + "_") or not fig.name.endswith(".png"):
            raise ValueError(f"{path}: figure {i}: name {fig.name!r} must be {number}_<name>.png")
        if fig.name in names:
            raise ValueError(f"{path}: figure {i}: name {fig.name!r} used twice")
        names.add(fig.name)
        figures.append(fig)
    return figures


def figures_of(chapter_name: str, mapping: list) -> list:
    """The entries for one chapter file name."""
    return [f for f in mapping if f.chapter == chapter_name]


def _cell_text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def figure_png(notebook: dict, fig: Figure) -> bytes:
    """The PNG bytes of fig in a notebook (nbformat JSON); ValueError says what moved or is missing."""
    cells = notebook.get("cells", [])
    by_id = {c.get("id"): c for c in cells}
    cell = by_id.get(fig.cell)
    if cell is None or fig.contains not in _cell_text(cell):
        now = [c.get("id") for c in cells if fig.contains in _cell_text(c)]
        where = f"that line is now in cell {', '.join(now)}" if now else "no cell holds that line any more"
        raise ValueError(f"{fig.chapter}: cell {fig.cell} does not hold {fig.contains!r} ({where}); "
                         f"update {fig.name}'s entry in figures/figures.toml (`python tools/figures.py retarget`)")
    images = [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    if fig.image >= len(images):
        raise ValueError(f"{fig.chapter}: cell {fig.cell} has {len(images)} image output(s), "
                         f"{fig.name} wants image {fig.image}; run the chapter (its outputs are committed)")
    data = images[fig.image]
    return base64.b64decode("".join(data) if isinstance(data, list) else data)


def pixels(png: bytes):
    """RGBA pixels of a PNG as a uint8 array [height, width, 4]."""
    import numpy as np
    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return np.asarray(im.convert("RGBA"))


def same_figure(a: bytes, b: bytes) -> bool:
    """Whether two PNGs show the same picture (equal bytes, or equal size and pixels within tolerance)."""
    if a == b:
        return True
    pa, pb = pixels(a), pixels(b)
    if pa.shape != pb.shape:
        return False
    changed = (abs(pa.astype(int) - pb.astype(int)) > PIXEL_TOLERANCE).any(axis=-1)
    return changed.mean() <= MAX_CHANGED_SHARE


def export(notebook_path: Path, out_dir: Path = FIGURES, mapping: list | None = None,
           chapter_name: str | None = None) -> list:
    """Write notebook_path's mapped figures into out_dir; return [(name, "new" | "same" | "changed")].

    chapter_name is the chapter the notebook is a copy of (default: its own file name). A figure whose
    picture is unchanged is left as it is, so its bytes only change when the drawing does.
    """
    mapping = load_mapping() if mapping is None else mapping
    chapter_name = chapter_name or Path(notebook_path).name
    notebook = json.loads(Path(notebook_path).read_text())
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for fig in figures_of(chapter_name, mapping):
        fresh = figure_png(notebook, fig)
        target = out_dir / fig.name
        if not target.exists():
            status = "new"
        elif same_figure(target.read_bytes(), fresh):
            results.append((fig.name, "same"))
            continue
        else:
            status = "changed"
        target.write_bytes(fresh)
        results.append((fig.name, status))
    return results


def course_run_check(executed: Path, chapter_name: str, out_dir: Path = FIGURES) -> list:
    """For scripts/run_course.py: refresh a chapter's figures from its fresh run; one message per change."""
    try:
        results = export(executed, out_dir, chapter_name=chapter_name)
    except (ValueError, OSError) as exc:
        return [f"figures: {exc}"]
    return [f"figures: {name} was {'missing' if status == 'new' else 'out of date'}; rewritten from "
            f"{chapter_name}'s fresh run: commit it" for name, status in results if status != "same"]


def check(out_dir: Path = FIGURES, chapters: Path = CHAPTERS, mapping: list | None = None) -> list:
    """Problems: a numbered chapter without a figure, a mapped figure missing or unlike its notebook's output."""
    mapping = load_mapping() if mapping is None else mapping
    problems = []
    mapped = {f.chapter for f in mapping}
    for nb_path in sorted(Path(chapters).glob("[0-9][0-9]_*.ipynb")):
        if nb_path.name not in mapped:
            problems.append(f"{nb_path.name}: no key figure in figures/figures.toml")
    for fig in mapping:
        nb_path = Path(chapters) / fig.chapter
        if not nb_path.is_file():
            problems.append(f"{fig.name}: chapter {fig.chapter} does not exist")
            continue
        try:
            committed = figure_png(json.loads(nb_path.read_text()), fig)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        target = Path(out_dir) / fig.name
        if not target.is_file():
            problems.append(f"{fig.name}: missing; run `python tools/figures.py export`")
        elif not same_figure(target.read_bytes(), committed):
            problems.append(f"{fig.name}: differs from {fig.chapter} cell {fig.cell}'s committed output; "
                            "run `python tools/figures.py export` and commit it")
    return problems


def retarget(path: Path = MAPPING, chapters: Path = CHAPTERS) -> list:
    """Rewrite figures.toml so each entry names the one cell that now holds its line; return the moves."""
    text = Path(path).read_text()
    head, *blocks = text.split("[[figure]]")
    moves = []
    for i, (fig, block) in enumerate(zip(load_mapping(path), blocks)):
        cells = json.loads((Path(chapters) / fig.chapter).read_text())["cells"]
        holders = [c.get("id") for c in cells if fig.contains in _cell_text(c)]
        if fig.cell in holders or len(holders) != 1:
            continue  # in place, or gone / ambiguous: `check` says so
        blocks[i] = block.replace(f'cell = "{fig.cell}"', f'cell = "{holders[0]}"', 1)
        moves.append(f"{fig.name}: {fig.chapter} cell {fig.cell} -> {holders[0]}")
    Path(path).write_text("[[figure]]".join([head, *blocks]))
    return moves


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_export = sub.add_parser("export", help="write the mapped figures of notebooks (default: every chapter)")
    p_export.add_argument("notebooks", nargs="*", type=Path)
    p_export.add_argument("--out", type=Path, default=FIGURES)
    p_check = sub.add_parser("check", help="compare figures/ with the committed notebooks' outputs")
    p_check.add_argument("--out", type=Path, default=FIGURES)
    sub.add_parser("retarget", help="point entries at the cells that now hold their `contains` line")
    args = parser.parse_args(argv)
    if args.command == "retarget":
        for move in retarget():
            print(move)
        return 0
    if args.command == "export":
        mapping = load_mapping()
        notebooks = args.notebooks or sorted({CHAPTERS / f.chapter for f in mapping})
        for nb_path in notebooks:
            for name, status in export(nb_path, args.out, mapping):
                print(f"{status:8} {name}")
        return 0
    problems = check(args.out)
    for p in problems:
        print(p)
    print(f"figures: {len(load_mapping())} mapped, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
