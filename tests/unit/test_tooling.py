"""tools/nb.py: package/notebook sync check and static chapter checks."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

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


def write_chapter(path: Path, cells: list) -> None:
    """Write a notebook from (source, tags, execution_count) triples."""
    nb = nbformat.v4.new_notebook()
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


def test_static_flags_untagged_cell_using_a_gpu_only_name(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_leaky.ipynb", [
        ("import torch", [], 1),
        ("fast = torch.ones(2, device='cuda')", ["gpu"], None),
        ("print(fast.sum())", [], 2),
    ])
    problems = load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_leaky.ipynb")
    assert any("fast" in p and "gpu cell" in p for p in problems), problems


def test_static_accepts_gpu_leaf_and_names_redefined_on_cpu(tmp_path):
    write_chapter(tmp_path / "chapters" / "01_leaf.ipynb", [
        ("x = 1", [], 1),
        ("y = x + 1\nprint(y)", ["gpu"], 3),  # numbered by an earlier GPU run
        ("y = 5\nprint(x + y)", [], 2),
    ])
    assert load_tool(tmp_path).notebook_problems(tmp_path / "chapters" / "01_leaf.ipynb") == []


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
    """Copy tools/nb.py under `root` and run it there."""
    (root / "tools").mkdir(exist_ok=True)
    shutil.copy(NB_TOOL, root / "tools" / "nb.py")
    return run_tool(root, *args)
