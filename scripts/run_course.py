"""Execute every chapter headless, on copies, and report one line per chapter."""
import importlib.util
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def load_nb_tool():
    """Import tools/nb.py by path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("nb_tool", REPO / "tools" / "nb.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_error_line(exc: Exception) -> str:
    """The most telling line of a failed execution (the exception name and message)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # drop terminal colours from the traceback
    lines = [l for l in text.splitlines() if l.strip()]
    named = [l for l in lines if "Error" in l or "Exception" in l]
    return (named or lines or [type(exc).__name__])[-1].strip()[:200]


def main() -> int:
    nb = load_nb_tool()
    chapters = nb.chapter_paths()
    if not chapters:
        print("no chapters found in chapters/")
        return 1
    failed = []
    with tempfile.TemporaryDirectory(prefix="nanoserve_course_") as tmp:
        for chapter in chapters:
            copy = Path(tmp) / chapter.name
            shutil.copy(chapter, copy)
            start = time.perf_counter()
            try:
                # the kernel works in chapters/ (as under nbval) so relative reads behave the same
                nb.execute(copy, cwd=nb.CHAPTERS)
            except Exception as exc:  # report every chapter, then fail
                failed.append(chapter.name)
                print(f"FAIL {chapter.name} ({time.perf_counter() - start:.1f} s): {first_error_line(exc)}", flush=True)
            else:
                print(f"ok   {chapter.name} ({time.perf_counter() - start:.1f} s)", flush=True)
    if failed:
        print(f"{len(failed)} of {len(chapters)} chapters failed: {', '.join(failed)}")
        return 1
    print(f"all {len(chapters)} chapters ran successfully")
    return 0


if __name__ == "__main__":
    sys.exit(main())
