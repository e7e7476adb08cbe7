"""Copy GPU-cell recordings made on a GPU machine (run_gpu_cells.py) into chapters/recordings/.

Usage: python scripts/gpu/merge_gpu_outputs.py RESULTS/08_flash_attention.json [...]

Each JSON names its chapter. A recording replaces the chapter's recording of the same name only when the
cell's current source (without its marker line) is the source that ran on the GPU; anything else is reported
and left alone (re-run the GPU cells then). Afterwards re-execute the chapter on the CPU
(`python tools/nb.py run chapters/<chapter>.ipynb`) so its saved outputs show the new recordings.
Exit status 1 when some recording did not match its cell.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from course.recordings import parse_marker  # noqa: E402


def current_gpu_cells(nb_path):
    """Recording name -> current source (without the marker line) of a chapter's GPU cells."""
    cells = json.loads(Path(nb_path).read_text())["cells"]
    found = {}
    for cell in cells:
        source = "".join(cell["source"])
        marker = parse_marker(source) if cell["cell_type"] == "code" else None
        if marker:
            found[marker[1]] = source.split("\n", 1)[1]
    return found


def merge(json_path, chapters_dir):
    """Merge one results JSON into its chapter's recordings; return how many recordings did not match."""
    results = json.loads(Path(json_path).read_text())
    stem = results["chapter"]
    sources = current_gpu_cells(chapters_dir / f"{stem}.ipynb")
    target = chapters_dir / "recordings" / f"{stem}.json"
    book = json.loads(target.read_text()) if target.exists() else {"chapter": stem, "cells": {}}
    missed = 0
    for name, rec in results["cells"].items():
        if sources.get(name) != rec["source"]:
            print(f"{stem}: GPU cell \"{name}\" changed since the GPU run (or is gone); left alone")
            missed += 1
            continue
        book["cells"][name] = rec
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(book, indent=1, ensure_ascii=False) + "\n")
    print(f"{stem}: merged {len(results['cells']) - missed} of {len(results['cells'])} recordings into {target}")
    return missed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    args = ap.parse_args(argv)
    return 1 if sum(merge(p, args.chapters) for p in args.results) else 0


if __name__ == "__main__":
    sys.exit(main())
