"""Run chapters as plain Python on a GPU machine (no Jupyter there) and record the outputs of their gpu cells.

Usage: python scripts/gpu/run_gpu_cells.py chapters/07_flash_attention.ipynb [...] [--out DIR]

Every code cell of a chapter runs in order in one namespace (working directory: chapters/, as under
Jupyter), with stdout/stderr captured per cell and matplotlib on the Agg backend. For the cells tagged
`gpu` or `multigpu`, `DIR/<chapter>.gpu.json` gets `{cell_id: {"source": ..., "outputs": [...]}}` with
nbformat outputs (streams, a final expression's repr, errors); `scripts/gpu/merge_gpu_outputs.py`
writes them into the committed notebooks. Exit status 1 if any cell raised.
"""
import argparse
import ast
import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

GPU_TAGS = {"gpu", "multigpu"}


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
            outputs.append({"output_type": "stream", "name": name, "text": buf.getvalue()})
    if value is not None:
        outputs.append({"output_type": "execute_result", "execution_count": None, "metadata": {},
                        "data": {"text/plain": repr(value)}})
    if failed:
        outputs.append(outputs_error)
    return outputs, failed


def run_notebook(nb_path, out_dir):
    """Run every code cell of one chapter; write its gpu cells' outputs; return the number of failed cells."""
    nb = json.loads(Path(nb_path).read_text())
    namespace = {"__name__": "__main__"}
    recorded, failures = {}, 0
    cwd = os.getcwd()
    os.chdir(Path(nb_path).resolve().parent)
    try:
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            tags = set(cell.get("metadata", {}).get("tags", []))
            start = time.perf_counter()
            outputs, failed = run_cell(source, namespace)
            failures += failed
            cell_id = cell.get("id", f"index{i}")
            print(f"[{Path(nb_path).stem}] cell {cell_id} {'gpu ' if tags & GPU_TAGS else ''}"
                  f"{'FAILED' if failed else 'ok'} {time.perf_counter() - start:.1f}s", file=sys.__stdout__, flush=True)
            if failed or tags & GPU_TAGS:
                for o in outputs:
                    text = o.get("text") or "\n".join(o.get("traceback", [])) or o.get("data", {}).get("text/plain", "")
                    print(text[-3000:], file=sys.__stdout__, flush=True)
            if tags & GPU_TAGS:
                recorded[cell_id] = {"source": source, "outputs": outputs}
    finally:
        os.chdir(cwd)
    target = Path(out_dir) / f"{Path(nb_path).stem}.gpu.json"
    target.write_text(json.dumps(recorded, indent=1))
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
