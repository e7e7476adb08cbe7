"""Run All Cells on every chapter in JupyterLab; report seconds, error outputs and shown exercise answers.

    .venv/bin/python tests/browser/run_all_chapters.py [03_paged_kv ...]
Screenshots go to .browser_screenshots/; the exit status is 1 when any chapter shows an error.
"""
import sys
import time

from labdriver import REPO, SHOTS, Chapter, chapters_source, course_in_lab, describe_errors, missing_stack
from test_run_all_exercises import exercise_answers


def chapter_names(wanted):
    """Notebook names of the chapters (NN_*.ipynb), limited to those whose stem starts with a wanted prefix."""
    names = sorted(p.name for p in chapters_source().glob("[0-9A][0-9]_*.ipynb"))
    return [n for n in names if not wanted or any(n.startswith(w) for w in wanted)]


def run_chapter(lab, name):
    """Run All on one chapter; return (seconds, error lines, cells that never ran)."""
    chapter = Chapter(*lab, name)
    try:
        chapter.wait_for_kernel()
        try:
            seconds = chapter.run_all()
        except Exception:
            chapter.screenshot("driver-error")  # what the page showed when driving it failed
            raise
        chapter.screenshot("after-run-all", whole_notebook=True)
        answers = [f"an exercise's answer is shown: {line}" for line in exercise_answers(chapter)]
        return seconds, describe_errors(chapter.error_outputs()) + answers, chapter.unexecuted_cells()
    finally:
        chapter.close()


def main(wanted):
    reason = missing_stack()
    if reason:
        print(f"run_all_chapters: cannot run: {reason}")
        return 2
    names = chapter_names(wanted)
    start, failed = time.monotonic(), []
    with course_in_lab() as lab:
        print(f"JupyterLab up in {time.monotonic() - start:.1f} s")
        print(f"{'chapter':<28} {'seconds':>8} {'errors':>6} {'not run':>7}")
        for name in names:
            try:
                seconds, errors, skipped = run_chapter(lab, name)
            except Exception as e:  # a hung or broken chapter must not stop the report
                seconds, errors, skipped = float("nan"), [f"driver: {type(e).__name__}: {e}".splitlines()[0]], []
            print(f"{name:<28} {seconds:>8.1f} {len(errors):>6} {len(skipped):>7}", flush=True)
            for line in errors:
                print(f"    {line}")
            if skipped and not errors:
                print(f"    code cells {skipped} never ran, with no error shown: did the kernel die?")
            if errors or skipped:
                failed.append(name)
    print(f"total {time.monotonic() - start:.0f} s; screenshots in {SHOTS.relative_to(REPO)}/")
    print("all chapters ran clean" if not failed else f"chapters with errors: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
