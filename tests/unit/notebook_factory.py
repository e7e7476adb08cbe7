"""Small chapters written on the fly for the tooling tests: markdown and code cells with printed outputs."""
import json
from pathlib import Path

import nbformat


def numbers_chapter(tmp_path, cells, name="01_strict.ipynb", recordings=None) -> Path:
    """A chapter from ("md", text) and ("code", source, printed) items, and its recordings file if given."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    for i, item in enumerate(cells):
        if item[0] == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(item[1], id=f"c{i:03d}"))
        else:
            cell = nbformat.v4.new_code_cell(item[1], execution_count=i + 1, id=f"c{i:03d}")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=item[2])] if item[2] else []
            nb.cells.append(cell)
    path = tmp_path / "chapters" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if recordings is not None:
        (path.parent / "recordings").mkdir(exist_ok=True)
        (path.parent / "recordings" / f"{path.stem}.json").write_text(json.dumps({"chapter": path.stem,
                                                                                  "cells": recordings}))
    nbformat.write(nb, path)
    return path
