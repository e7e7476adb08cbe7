"""Write outputs recorded on a GPU machine (run_gpu_cells.py) into the committed chapters' gpu cells.

Usage: python scripts/gpu/merge_gpu_outputs.py RESULTS/07_flash_attention.gpu.json [...]

Each JSON names its chapter (`chapters/<stem>.ipynb`). A cell is updated only when its id and its source
both match what ran on the GPU; anything else is reported and left alone (re-run the GPU cells then).
Outputs become nbformat outputs with execution_count None. Exit status 1 when some cell did not match.
"""
import argparse
import sys
from pathlib import Path

import json

ROOT = Path(__file__).resolve().parents[2]


def merge(json_path, chapters_dir):
    """Merge one recorded JSON into its chapter; return the number of recorded cells that did not match."""
    import nbformat

    recorded = json.loads(Path(json_path).read_text())
    stem = Path(json_path).name.removesuffix(".gpu.json")
    nb_path = chapters_dir / f"{stem}.ipynb"
    nb = nbformat.read(str(nb_path), as_version=4)
    cells = {c.get("id"): c for c in nb.cells if c.cell_type == "code"}
    missed = 0
    for cell_id, rec in recorded.items():
        cell = cells.get(cell_id)
        if cell is None or cell.source != rec["source"]:
            print(f"{nb_path.name}: cell {cell_id} changed since the GPU run; left alone")
            missed += 1
            continue
        cell.outputs = [nbformat.from_dict(o) for o in rec["outputs"]]
        for o in cell.outputs:
            if o.get("output_type") == "execute_result":
                o["execution_count"] = None
        cell.execution_count = None
    nbformat.write(nb, str(nb_path))
    print(f"{nb_path.name}: merged {len(recorded) - missed} of {len(recorded)} gpu cells")
    return missed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    args = ap.parse_args(argv)
    return 1 if sum(merge(p, args.chapters) for p in args.results) else 0


if __name__ == "__main__":
    sys.exit(main())
