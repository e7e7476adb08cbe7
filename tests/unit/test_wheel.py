"""The wheel ships nanoserve and nanobench only; an editable install still finds `course` in the checkout."""
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "nanoserve", "nanobench", "course")


def copy_sources(dest: Path) -> Path:
    """The files a build reads, copied so the build leaves nothing in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    dest.mkdir(parents=True)
    for name in SOURCES:
        src = ROOT / name
        shutil.copytree(src, dest / name, ignore=ignore) if src.is_dir() else shutil.copy(src, dest / name)
    return dest


def pip(*args, cwd):
    result = subprocess.run([sys.executable, "-m", "pip", *args, "--no-deps", "--no-build-isolation", "-q"],
                            cwd=cwd, capture_output=True, text=True, timeout=300)
    if result.returncode:
        pytest.fail(f"pip {args[0]} failed:\n{result.stderr[-2000:]}")


def test_the_wheel_ships_the_engine_and_the_bench_only(tmp_path):
    src = copy_sources(tmp_path / "src")
    pip("wheel", str(src), "-w", str(tmp_path / "wheels"), cwd=tmp_path)
    (wheel,) = (tmp_path / "wheels").glob("nanoserve-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"nanoserve", "nanobench"}
    assert "nanoserve/py.typed" in names and "nanoserve/llm.py" in names and "nanobench/__main__.py" in names


def test_an_editable_install_puts_the_checkout_on_the_path(tmp_path):
    """So `from course...` works in chapters/ (Jupyter's cwd), where the package list no longer names it."""
    src = copy_sources(tmp_path / "src")
    # --ignore-installed: without it pip first uninstalls the checkout's own editable install from the running venv
    pip("install", "-e", str(src), "--prefix", str(tmp_path / "prefix"), "--ignore-installed", cwd=tmp_path)
    site = next((tmp_path / "prefix").glob("lib/python*/site-packages"))
    (src / "chapters").mkdir()
    probe = f"import site; site.addsitedir({str(site)!r}); import course, nanoserve; print(course.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a worktree's PYTHONPATH would find course first
    out = subprocess.run([sys.executable, "-S", "-c", probe], cwd=src / "chapters", capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == (src / "course" / "__init__.py").resolve()
