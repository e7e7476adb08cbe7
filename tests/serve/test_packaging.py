"""Packaging around the server: one version, `nanoserve --version`, a clear error without the serve extra, typed lazy exports."""
import importlib.util
from pathlib import Path

import nanoserve
from nanoserve.serve import main

ROOT = Path(__file__).resolve().parents[2]


def test_version_is_written_once_and_printed(capsys):
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'attr = "nanoserve.__version__"' in text and "\nversion = \"" not in text
    assert 'license = "Apache-2.0"' in text and (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"nanoserve {nanoserve.__version__}"


def test_lazy_exports_are_listed_and_typed():
    assert {"LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "LLMEngine"} <= set(dir(nanoserve))
    assert (Path(nanoserve.__file__).parent / "py.typed").exists()
    assert "if TYPE_CHECKING:" in Path(nanoserve.__file__).read_text()


def test_serve_without_the_serve_extra_says_so(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "fastapi" else real(name, *a))
    assert main(["serve", "some-model"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fastapi" in err and "nanoserve[serve]" in err


def test_python_dash_m_nanoserve_runs_the_console_scripts_main():
    """`python -m nanoserve` is the `nanoserve` script (pyproject's entry point); `-m nanoserve.serve` takes a model first."""
    import subprocess
    import sys

    assert 'nanoserve = "nanoserve.serve:main"' in (ROOT / "pyproject.toml").read_text()

    def run(*args):
        return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)

    shown = run("nanoserve", "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: nanoserve <command>"), shown.stderr
    serve_help = run("nanoserve", "serve", "--help")
    assert serve_help.returncode == 0 and "--ssl-keyfile" in serve_help.stdout
    bogus = run("nanoserve", "bogus")
    assert bogus.returncode == 2 and "invalid command 'bogus'" in bogus.stderr
    shortcut = run("nanoserve.serve", "/no/such/model", "--port", "0")  # documented in appendix A6
    assert shortcut.returncode == 1 and "nanoserve serve: error: " in shortcut.stderr, shortcut.stderr
