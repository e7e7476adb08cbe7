"""Execute every chapter headless, on copies, and report one line per chapter.

    python scripts/run_course.py          # run every chapter
    python scripts/run_course.py --reuse  # skip the run when these exact files already passed in this .venv

A run where every chapter passes leaves a stamp in .venv named by a hash of everything the chapters
read: the git-tracked files of the chapters, package, tools, committed benchmark results and set-up (their
working-tree content), and the Python and torch that ran them. Files git does not track (benchmarks/runs/,
caches, drafts) do not count. `--reuse` (scripts/test.sh) trusts that stamp, so `run_course.sh` then
`test.sh` executes the chapters once here, not twice; a fresh clone has no .venv stamp, so CI always runs them."""
import argparse
import hashlib
import importlib.util
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAMP_DIR = REPO / ".venv"
# what the chapters read or run: any change to these makes the stamp of an earlier run stale
HASHED = ("chapters", "nanoserve", "tools", "benchmarks", "scripts", "figures", "pyproject.toml",
          "constraints-cpu.txt", "conftest.py")
SKIPPED_PARTS = {"__pycache__", ".ipynb_checkpoints"}


def load_nb_tool():
    """Import tools/nb.py by path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("nb_tool", REPO / "tools" / "nb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# >>> figures hook (issue 27; tools/figures.py owns the logic)
def load_figures_tool():
    """Import tools/figures.py by path: each chapter's key figure, exported from its fresh run."""
    spec = importlib.util.spec_from_file_location("figures_tool", REPO / "tools" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
# <<< figures hook


def plain_text(exc: Exception) -> str:
    """A failed execution's traceback without terminal colours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(exc))


def tail_of(exc: Exception, lines: int = 25) -> str:
    """The last lines of a failed execution's traceback, indented."""
    return "\n".join("    " + l for l in plain_text(exc).splitlines()[-lines:])


def first_error_line(exc: Exception) -> str:
    """The most telling line of a failed execution (the exception name and message)."""
    text = plain_text(exc)
    lines = [l for l in text.splitlines() if l.strip()]
    named = [l for l in lines if "Error" in l or "Exception" in l]
    where = [l.replace("---->", "").strip() for l in lines if l.lstrip().startswith("---->")]  # the failing line
    error = (named or lines or [type(exc).__name__])[-1].strip()[:200]
    return f"{error} (at: {where[0][:120]})" if where else error


def tracked_files() -> list | None:
    """Git-tracked paths under HASHED, relative to REPO (sorted); None when REPO is not a git work tree."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", *HASHED], cwd=REPO, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return sorted({name for name in listed.stdout.decode().split("\0") if name})


def walked_files() -> list:
    """Every file under HASHED but caches, relative to REPO: the fallback outside a git work tree."""
    found = []
    for name in HASHED:
        root = REPO / name
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        found += [str(p.relative_to(REPO)) for p in paths if SKIPPED_PARTS.isdisjoint(p.relative_to(REPO).parts)]
    return found


def inputs_hash() -> str:
    """Hash of the files the chapters depend on (tracked ones, as they are now), and of the Python and torch."""
    import torch

    digest = hashlib.sha256(f"{platform.python_version()} torch {torch.__version__} "
                            f"cuda {torch.cuda.is_available()}\n".encode())
    files = tracked_files()
    for name in walked_files() if files is None else files:
        path = REPO / name
        digest.update(f"{name}\n".encode())
        # the working-tree content, so an uncommitted edit counts; a tracked file deleted counts too
        digest.update(hashlib.sha256(path.read_bytes()).digest() if path.is_file() else b"deleted")
    return digest.hexdigest()[:16]


def format_seconds(seconds: float) -> str:
    """125.3 -> '2 min 5 s'; 42.0 -> '42 s'."""
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def stamp_path(digest: str) -> Path:
    """Where a passing run of these exact inputs is recorded."""
    return STAMP_DIR / f".nanoserve-course-ok-{digest}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Execute every chapter headless on copies, one line per chapter.")
    parser.add_argument("--reuse", action="store_true",
                        help="skip the run if every chapter already passed with exactly these files in this .venv")
    args = parser.parse_args(argv)
    nb = load_nb_tool()
    chapters = nb.chapter_paths()
    if not chapters:
        print("no chapters found in chapters/")
        return 1
    digest = inputs_hash()
    stamp = stamp_path(digest)
    if args.reuse and stamp.is_file():
        print(f"skipped: all {len(chapters)} chapters passed with these exact files on {stamp.read_text().strip()} "
              "(scripts/run_course.sh); run scripts/run_course.py without --reuse to run them again")
        return 0
    failed, flaky, total, began = [], [], len(chapters), time.perf_counter()
    print(f"running {total} chapters, one line as each finishes", flush=True)
    with tempfile.TemporaryDirectory(prefix="nanoserve_course_") as tmp:
        for number, chapter in enumerate(chapters, 1):
            counter = f"[{number}/{total}]"
            copy = Path(tmp) / chapter.name
            start = time.perf_counter()
            errors = []  # one line per failed run; a chapter gets a second run before it counts as failed
            while len(errors) < 2:
                shutil.copy(chapter, copy)
                try:
                    # the kernel works in chapters/ (as under nbval) so relative reads behave the same
                    nb.execute(copy, cwd=nb.CHAPTERS)
                    break
                except Exception as exc:
                    errors.append(first_error_line(exc))
                    print(f"{counter} run {len(errors)} of {chapter.name} failed: {errors[-1]}\n{tail_of(exc)}",
                          flush=True)
            error = errors[-1] if len(errors) == 2 else None
            if len(errors) == 1:  # passed when run again: named as flaky in the summary, to be found and fixed
                flaky.append(f"{chapter.name}: {errors[0]}")
            if error is not None:
                failed.append(chapter.name)
                print(f"{counter} FAIL {chapter.name} ({time.perf_counter() - start:.1f} s): {error}", flush=True)
            else:
                print(f"{counter} ok   {chapter.name} ({time.perf_counter() - start:.1f} s)", flush=True)
                # >>> figures hook: rewrite figures/ from this fresh run; a figure that changed fails the run
                for problem in load_figures_tool().course_run_check(copy, chapter.name):
                    failed.append(chapter.name)
                    print(f"{counter} FAIL {chapter.name}: {problem}", flush=True)
                # <<< figures hook
    took = format_seconds(time.perf_counter() - began)
    for line in flaky:
        print(f"FLAKY (failed once, passed when run again) {line}", flush=True)
    if failed:
        print(f"{len(set(failed))} of {total} chapters failed in {took}: {', '.join(dict.fromkeys(failed))}")
        return 1
    print(f"all {total} chapters ran successfully in {took}")
    if digest == inputs_hash() and STAMP_DIR.is_dir():  # a file that changed during the run proves nothing
        for old in STAMP_DIR.glob(".nanoserve-course-ok-*"):
            old.unlink()
        stamp.write_text(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
