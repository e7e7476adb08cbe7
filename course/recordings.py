"""GPU cells on a machine without the GPU: show the output recorded on one instead of failing.

A chapter cell that needs CUDA starts with a marker line such as

    # GPU cell (needs 1 CUDA GPU): recording "triton-store"

After `replay_gpu_cells("recordings/08_flash_attention.json")` in a chapter, IPython runs such a cell as
written when enough CUDA devices are present, and otherwise replaces it with a replay of that recording: a
one-line note, then the outputs (text and figures) the cell printed on the GPU machine. Nothing raises, so
Run All goes on. Plain Python (no IPython) runs every cell as written. Hand-written, not exported by a chapter.
"""
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

GPU_CELL = re.compile(r'^# GPU cell \(needs (\d+) CUDA GPUs?\): recording "([\w.-]+)"\s*$')


def parse_marker(source: str):
    """(GPUs needed, recording name) from a cell's first line, or None for an ordinary cell."""
    first = source.lstrip("\n").split("\n", 1)[0]
    match = GPU_CELL.match(first)
    return (int(match.group(1)), match.group(2)) if match else None


@lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """CUDA devices torch can use (0 without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def load_recordings(path) -> dict:
    """The recordings file of one chapter: {"chapter": ..., "cells": {name: {...}}}."""
    return json.loads(Path(path).read_text())


def note_line(path, name: str, cell: dict) -> str:
    """The one-line note printed above a replayed recording."""
    needs = cell["needs_gpus"]
    gpus = "a CUDA GPU" if needs == 1 else f"{needs} CUDA GPUs"
    return (f"[recording] this cell needs {gpus}, which this machine lacks; below is its output from "
            f"{cell['device']} on {cell['recorded']} ({Path(path).as_posix()}, \"{name}\")\n")


def show_recording(path, name: str) -> None:
    """Print the note and replay one recorded cell's outputs (streams, rich displays)."""
    cell = load_recordings(path)["cells"][name]
    sys.stdout.write(note_line(path, name, cell))
    for out in cell["outputs"]:
        kind = out["output_type"]
        if kind == "stream":
            stream = sys.stdout if out["name"] == "stdout" else sys.stderr
            stream.write(out["text"])
            stream.flush()
        elif kind in ("display_data", "execute_result"):
            from IPython.display import display

            sys.stdout.flush()
            display(out["data"], raw=True, metadata=out.get("metadata", {}))


def replay_cell_transformer(path):
    """An IPython input transformer that swaps a GPU cell for its recording when the GPUs are missing."""
    def transform(lines: list) -> list:
        marker = parse_marker("".join(lines))
        if marker is None or cuda_device_count() >= marker[0]:
            return lines
        return ["import course.recordings\n",
                f"course.recordings.show_recording({str(path)!r}, {marker[1]!r})\n"]

    transform.nanoserve_recordings = True
    return transform


def replay_gpu_cells(path) -> None:
    """Make this IPython kernel replay recordings for GPU cells it cannot run; nothing outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    if not Path(path).is_file():
        raise FileNotFoundError(f"no recordings file at {path} (run the chapter from the chapters/ folder)")
    transformers = shell.input_transformers_post
    transformers[:] = [t for t in transformers if not getattr(t, "nanoserve_recordings", False)]
    transformers.append(replay_cell_transformer(path))
