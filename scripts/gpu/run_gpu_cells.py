"""Run chapters as plain Python on a GPU machine (no Jupyter there) and record the outputs of their GPU cells.

Usage: python scripts/gpu/run_gpu_cells.py chapters/08_flash_attention.ipynb [...] [--out DIR]

Every code cell of a chapter runs in order in one namespace (working directory: chapters/, as under
Jupyter), with stdout/stderr captured per cell and matplotlib on the Agg backend. For each GPU cell (first
line `# GPU cell (needs N CUDA GPUs): recording "NAME"`), `DIR/<chapter>.json` gets the recording in the
format of chapters/recordings/: source (without the marker line), outputs (streams with progress-bar
carriage returns collapsed, a final expression's repr, figures as PNG), device, date and command.
`scripts/gpu/merge_gpu_outputs.py` copies them into chapters/recordings/. Exit status 1 if any cell raised.
"""
import argparse
import ast
import base64
import contextlib
import datetime
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from course.recordings import parse_marker  # noqa: E402


def split_last_expression(source):
    """Compile a cell; return (body code, last-expression code or None), like Jupyter's display rule."""
    tree = ast.parse(source)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return compile(tree, "<cell>", "exec"), (compile(last, "<cell>", "eval") if last else None)


def run_cell(source, namespace):
    """Execute one cell; return its nbformat outputs and whether it raised."""
    out, err = io.StringIO(), io.StringIO()
    outputs, failed, value = [], False, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            body, last = split_last_expression(source)
            exec(body, namespace)
            if last is not None:
                value = eval(last, namespace)
        except Exception as e:  # recorded like Jupyter does, then the run goes on
            failed = True
            outputs_error = {"output_type": "error", "ename": type(e).__name__, "evalue": str(e),
                             "traceback": traceback.format_exc().splitlines()}
    for name, buf in (("stdout", out), ("stderr", err)):
        if buf.getvalue():
            outputs.append({"output_type": "stream", "name": name, "text": collapse_carriage_returns(buf.getvalue())})
    if value is not None:
        outputs.append({"output_type": "execute_result", "execution_count": None, "metadata": {},
                        "data": {"text/plain": repr(value)}})
    outputs += figure_outputs()
    if failed:
        outputs.append(outputs_error)
    return outputs, failed


def collapse_carriage_returns(text):
    """Keep what a terminal shows of each line: the part after its last carriage return."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def figure_outputs():
    """Every open matplotlib figure as a PNG display output; the figures are closed."""
    import matplotlib.pyplot as plt

    outputs = []
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png", bbox_inches="tight")
        outputs.append({"output_type": "display_data", "metadata": {},
                        "data": {"image/png": base64.b64encode(buf.getvalue()).decode(), "text/plain": "<Figure>"}})
    plt.close("all")
    return outputs


def device_name(gpus):
    """How the recording names the machine, e.g. 'an NVIDIA H200' or 'two NVIDIA H200 GPUs'."""
    import torch

    name = torch.cuda.get_device_name(0)
    return f"an {name}" if gpus == 1 else f"{['zero', 'one', 'two', 'three', 'four'][gpus]} {name} GPUs"


def run_notebook(nb_path, out_dir):
    """Run every code cell of one chapter; write its gpu cells' outputs; return the number of failed cells."""
    nb = json.loads(Path(nb_path).read_text())
    namespace = {"__name__": "__main__"}
    recorded, failures = {}, 0
    today = datetime.date.today().isoformat()
    cwd = os.getcwd()
    os.chdir(Path(nb_path).resolve().parent)
    try:
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            marker = parse_marker(source)
            start = time.perf_counter()
            outputs, failed = run_cell(source, namespace)
            failures += failed
            cell_id = cell.get("id", f"index{i}")
            print(f"[{Path(nb_path).stem}] cell {cell_id} {'gpu ' if marker else ''}"
                  f"{'FAILED' if failed else 'ok'} {time.perf_counter() - start:.1f}s", file=sys.__stdout__, flush=True)
            if failed or marker:
                for o in outputs:
                    text = o.get("text") or "\n".join(o.get("traceback", [])) or o.get("data", {}).get("text/plain", "")
                    print(text[-3000:], file=sys.__stdout__, flush=True)
            if marker and not failed:
                gpus, name = marker
                recorded[name] = {"needs_gpus": gpus, "device": device_name(gpus), "recorded": today,
                                  "command": f"python scripts/gpu/run_gpu_cells.py chapters/{Path(nb_path).name}",
                                  "source": source.split("\n", 1)[1], "outputs": outputs}
    finally:
        os.chdir(cwd)
    target = Path(out_dir) / f"{Path(nb_path).stem}.json"
    target.write_text(json.dumps({"chapter": Path(nb_path).stem, "cells": recorded}, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {target} ({len(recorded)} gpu cells, {failures} failed cells)", flush=True)
    return failures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    args.out.mkdir(parents=True, exist_ok=True)
    failures = sum(run_notebook(nb.resolve(), args.out) for nb in args.notebooks)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
