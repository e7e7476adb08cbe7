"""tools/nb.py: package/notebook sync check and static chapter checks."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from notebook_factory import numbers_chapter

REPO = Path(__file__).resolve().parents[2]
NB_TOOL = REPO / "tools" / "nb.py"
OUT_OF_SYNC = "notebooks and package are out of sync"


def run_tool(root: Path, *args: str) -> subprocess.CompletedProcess:
    """Run `python tools/nb.py ARGS` inside the repository (or a copy) at `root`."""
    return subprocess.run([sys.executable, str(root / "tools" / "nb.py"), *args],
                          cwd=root, capture_output=True, text=True, timeout=300)


def load_tool(root: Path):
    """Import tools/nb.py with its ROOT pointed at `root`."""
    spec = importlib.util.spec_from_file_location("nb_tool_under_test", NB_TOOL)
    module = importlib.util.module_from_spec(spec)
    mp = pytest.MonkeyPatch()
    mp.setenv("NANOSERVE_ROOT", str(root))
    try:
        spec.loader.exec_module(module)
    finally:
        mp.undo()
    return module


GPU_MARKER = '# GPU cell (needs 1 CUDA GPU): recording "demo"\n'


def write_chapter(path: Path, cells: list, recordings: dict | None = None) -> None:
    """Write a notebook from (source, tags, execution_count) triples, and its recordings file if given."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    if recordings is not None:
        (path.parent / "recordings").mkdir(parents=True, exist_ok=True)
        (path.parent / "recordings" / f"{path.stem}.json").write_text(
            json.dumps({"chapter": path.stem, "cells": recordings}))
    for i, (src, tags, count) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(src, execution_count=count, id=f"c{i:03d}")
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


@pytest.fixture
def repo_copy(tmp_path):
    """A scratch copy of chapters/, nanoserve/ and tools/."""
    root = tmp_path / "repo"
    for name in ("chapters", "nanoserve", "tools"):
        shutil.copytree(REPO / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    return root


def test_check_passes_on_the_repository():
    result = run_tool(REPO, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "in sync" in result.stdout


def test_editing_an_exported_cell_without_exporting_fails_check(repo_copy):
    chapter = repo_copy / "chapters" / "99_sync_probe.ipynb"
    write_chapter(chapter, [("#| default_exp sync_probe", [], 1),
                            ("#| export\ndef probe():\n    return 1", [], 2)])
    assert run_tool(repo_copy, "export").returncode == 0
    assert run_tool(repo_copy, "check").returncode == 0

    nb = nbformat.read(str(chapter), as_version=4)
    nb.cells[1].source = "#| export\ndef probe():\n    return 2"
    nbformat.write(nb, str(chapter))
    result = run_tool(repo_copy, "check")
    assert result.returncode == 1
    assert OUT_OF_SYNC in result.stdout
    assert "nanoserve/sync_probe.py" in result.stdout

    assert run_tool(repo_copy, "export").returncode == 0
    result = run_tool(repo_copy, "check")
    assert result.returncode == 0, result.stdout
    assert "return 2" in (repo_copy / "nanoserve" / "sync_probe.py").read_text()


def test_hand_edited_generated_module_fails_check(repo_copy):
    chapter = repo_copy / "chapters" / "99_sync_probe.ipynb"
    write_chapter(chapter, [("#| default_exp sync_probe", [], 1),
                            ("#| export\ndef probe():\n    return 1", [], 2)])
    assert run_tool(repo_copy, "export").returncode == 0
    module = repo_copy / "nanoserve" / "sync_probe.py"
    module.write_text(module.read_text().replace("return 1", "return 3"))
    result = run_tool(repo_copy, "check")
    assert result.returncode == 1 and OUT_OF_SYNC in result.stdout


def recording_of(source: str, text: str = "on the GPU\n") -> dict:
    """A recordings entry made from `source` (the cell without its marker line)."""
    return {"needs_gpus": 1, "device": "an NVIDIA H200", "recorded": "2026-11-30", "command": "test",
            "source": source, "outputs": [{"output_type": "stream", "name": "stdout", "text": text}]}


def test_static_flags_untagged_cell_using_a_gpu_only_name(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_leaky.ipynb", [
        ("import torch", [], 1),
        (GPU_MARKER + "fast = torch.ones(2, device='cuda')", ["gpu"], 2),
        ("print(fast.sum())", [], 3),
    ], {"demo": recording_of("fast = torch.ones(2, device='cuda')")})
    problems = load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_leaky.ipynb")
    assert problems == [" cell 2: uses ['fast'] defined only in a GPU cell"], problems


def test_static_accepts_recorded_gpu_leaf_and_names_redefined_on_cpu(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_leaf.ipynb", [
        ("x = 1", [], 1),
        (GPU_MARKER + "y = x + 1\nprint(y)", ["gpu"], 2),
        ("y = 5\nprint(x + y)", [], 3),
    ], {"demo": recording_of("y = x + 1\nprint(y)")})
    assert load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_leaf.ipynb") == []


@pytest.mark.parametrize("source, recordings, expected", [
    ("y = 2", {"demo": recording_of("y = 2")}, "no GPU-cell marker line"),
    (GPU_MARKER + "y = 2", {}, 'no recording "demo"'),
    (GPU_MARKER + "y = 3", {"demo": recording_of("y = 2")}, "made from different code"),
    (GPU_MARKER.replace("1 CUDA GPU", "2 CUDA GPUs") + "y = 2", {"demo": recording_of("y = 2")}, "marker says 2"),
])
def test_static_flags_gpu_cells_without_a_current_recording(tmp_path, source, recordings, expected):
    write_chapter(tmp_path / "chapters" / "01_gpu.ipynb", [(source, ["gpu"], 1)], recordings)
    problems = load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_gpu.ipynb")
    assert len(problems) == 1 and expected in problems[0], problems


def test_execute_replays_a_gpu_cell_without_cuda_and_runs_on(tmp_path):
    chapter = tmp_path / "chapters" / "01_replay.ipynb"
    write_chapter(chapter, [
        ('from course.recordings import replay_gpu_cells\n'
         'replay_gpu_cells("recordings/01_replay.json")', [], None),
        (GPU_MARKER + "raise RuntimeError('no CUDA here')", ["gpu"], None),
        ("print('after', 1 + 1)", [], None),
    ], {"demo": recording_of("raise RuntimeError('no CUDA here')", "42 tok/s on the H200\n")})
    tool = load_tool(tmp_path)
    tool.execute(chapter, cwd=chapter.parent)
    cells = nbformat.read(str(chapter), as_version=4).cells
    gpu_text = "".join(o.get("text", "") for o in cells[1].outputs)
    assert gpu_text.startswith("[recording] this cell needs a CUDA GPU") and "42 tok/s on the H200" in gpu_text
    assert [o.output_type for o in cells[1].outputs] == ["stream"]
    assert cells[2].outputs[0].text == "after 2\n"


def test_static_flags_execution_counts_out_of_order(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_shuffled.ipynb", [
        ("a = 1", [], 2), ("b = 2", [], 1), ("c = a + b", [], 3)])
    write_chapter(tmp_path / "chapters" / "02_unrun.ipynb", [("a = 1", [], None)])
    tool = load_tool(tmp_path)
    for name in ("01_shuffled.ipynb", "02_unrun.ipynb"):
        problems = tool.notebook_problems(tmp_path / "chapters" / name)
        assert any("execution counts" in p for p in problems), (name, problems)
    result = run_tool_copy(tmp_path, "static")
    assert result.returncode == 1
    assert "01_shuffled.ipynb" in result.stdout and "02_unrun.ipynb" in result.stdout


def test_static_flags_oversized_chapter(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_big.ipynb", [("s = '" + "x" * 1_100_000 + "'", [], 1)])
    problems = load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_big.ipynb")
    assert any("1 MB" in p for p in problems)


def run_tool_copy(root: Path, *args: str) -> subprocess.CompletedProcess:
    """Copy tools/nb.py (and the module it imports) under `root` and run it there."""
    (root / "tools").mkdir(exist_ok=True)
    shutil.copy(NB_TOOL, root / "tools" / "nb.py")
    shutil.copy(NB_TOOL.parent / "prose_numbers.py", root / "tools" / "prose_numbers.py")
    return run_tool(root, *args)


def load_script(name: str):
    """Import a scripts/gpu/*.py file as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_recorder_output_merges_into_a_current_recording(tmp_path, monkeypatch):
    chapter = tmp_path / "chapters" / "01_rec.ipynb"
    body = "import matplotlib.pyplot as plt\nprint('step 1\\rstep 2 done')\nplt.plot([1, 2])"
    write_chapter(chapter, [("x = 1", [], 1), (GPU_MARKER + body, ["gpu"], 2)], {})
    recorder = load_script("run_gpu_cells")
    monkeypatch.setattr(recorder, "device_name", lambda gpus: "an NVIDIA H200")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert recorder.run_notebook(chapter, tmp_path) == 0
    assert load_script("merge_gpu_outputs").merge(tmp_path / "01_rec.json", chapter.parent) == 0
    rec = json.loads((chapter.parent / "recordings" / "01_rec.json").read_text())["cells"]["demo"]
    assert rec["outputs"][0]["text"] == "step 2 done\n"
    assert [o["output_type"] for o in rec["outputs"]][-1] == "display_data"  # the figure, as a PNG
    assert load_tool(tmp_path).notebook_problems(chapter) == []


def test_numbers_in_prose_must_be_marked_and_printed(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    code = nbformat.v4.new_code_cell("print('step 4.2 ms, 4475 blocks')", execution_count=1, id="c000")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="step 4.2 ms, 4475 blocks\n")]
    prose = ("A step takes 4.2 ms<!--o--> with 4,475<!--o--> blocks on 80 GB<!--f--> of memory; "
             "`9 ms` in code is ignored, $3 × 4$ too. It was 29 ms before, and 9.5×<!--o--> faster.")
    nb.cells = [code, nbformat.v4.new_markdown_cell(prose, id="c001")]
    path = tmp_path / "chapters" / "01_numbers.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    problems = load_tool(tmp_path).prose_problems(path, strict=False)
    assert problems == [" cell 1: '29 ms' has no <!--o--> (printed result) or <!--f--> (fact) marker",
                        " cell 1: '9.5×' is marked as a printed result but no output prints 9.5"]


def _strict_problems(tmp_path, cells, **kw) -> list:
    return load_tool(tmp_path).prose_problems(numbers_chapter(tmp_path, cells, **kw), strict=True)


def test_strict_numbers_accept_a_result_printed_with_its_unit_in_its_section(tmp_path):
    cells = [("md", "## Timing\nA step takes 4.2 ms<!--o-->, 5.1×<!--o--> faster, at 7,500 tok/s<!--o-->."),
             ("code", "print(t)", "step: 4.2 ms, speed-up 5.1x\nengine  tok/s\nours    7500\n")]
    assert _strict_problems(tmp_path, cells) == []


def test_strict_numbers_reject_a_stale_number(tmp_path):
    cells = [("md", "## Timing\nA step takes 4.2 ms<!--o-->."), ("code", "print(t)", "step: 3.9 ms\n")]
    assert _strict_problems(tmp_path, cells) == [
        " cell 0: '4.2 ms' is marked as a printed result but no output of this section prints 4.2 ms"]


def test_strict_numbers_reject_a_unitless_match(tmp_path):
    cells = [("md", "## Timing\nA step takes 42 ms<!--o-->."), ("code", "print(n)", "blocks: 42\n")]
    assert _strict_problems(tmp_path, cells) == [
        " cell 0: '42 ms' is marked as a printed result but this section's outputs print 42 without 'ms'"]


def test_strict_numbers_reject_a_number_found_only_in_a_code_comment(tmp_path):
    cells = [("md", "## Timing\nA step takes 4.2 ms<!--o-->."),
             ("code", "t = step()  # 4.2 ms on the H200\nprint('done')", "done\n")]
    problems = _strict_problems(tmp_path, cells)
    assert " cell 0: '4.2 ms' is marked as a printed result but no output of this section prints 4.2 ms" in problems
    assert any(p.startswith(" cell 1: '4.2 ms' in a code comment") for p in problems), problems


def test_strict_numbers_look_in_the_same_section_only(tmp_path):
    cells = [("code", "print(t)", "step: 4.2 ms\n"), ("md", "## Later\nA step takes 4.2 ms<!--o-->.")]
    assert len(_strict_problems(tmp_path, cells)) == 1
    # the loose rule (strict=False) still accepts the bare number anywhere
    assert load_tool(tmp_path).prose_problems(tmp_path / "chapters" / "01_strict.ipynb", strict=False) == []


def test_strict_numbers_read_a_named_recording_and_flag_stale_sessions(tmp_path):
    recordings = {"steps": {"recorded": "2026-12-01", "source": "", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": "session 2026-12-01T12:00:48Z: 6.28 ms\n"}]}}
    cells = [("md", "## H200\nOn session `2026-12-01T12:00:48Z` a step took 6.28 ms<!--o:steps-->; "
                    "on `2026-11-29T08:00:00Z` it took 6.79 ms<!--o:steps-->, and 1.5 ms<!--o:nope-->."),
             ("code", "print(1)", "1\n")]
    assert _strict_problems(tmp_path, cells, recordings=recordings) == [
        " cell 0: '6.79 ms' is not printed by recording \"steps\" with its unit",
        " cell 0: '1.5 ms' cites recording \"nope\", which this chapter lacks",
        " cell 0: '2026-11-29T08:00:00Z' (a date, session or commit id) is printed by no output or recording of this "
        "chapter: stale?"]
