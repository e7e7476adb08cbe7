"""A new user's first hour (issue 39): set-up's messages, the course stamp, numbered lines, per-user paths, CLI mistakes."""
import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HAS_GIT = shutil.which("git") is not None


# ---- set-up: progress while pip works, and the cause first when the CPU wheel cannot be fetched ----------
UNREACHABLE_PIP = """\
Looking in indexes: https://example.invalid/whl/cpu
WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /whl/cpu/torch/
ERROR: Cannot install torch because these package versions have conflicting dependencies.
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def fake_setup_tree(tmp_path: Path, pip_script: str) -> Path:
    """A copy of the set-up inputs whose .venv/bin/python runs `pip_script` for `-m pip` and sees no packages."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    for name in ("scripts/setup.sh", "constraints-cpu.txt", "pyproject.toml"):
        shutil.copy(REPO / name, root / name)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    # -S: no site-packages, so torch and nanoserve look absent and set-up goes on to install them
    python.write_text(textwrap.dedent(f"""\
        #!/usr/bin/env bash
        if [[ "$1" == -m && "$2" == pip ]]; then
        {textwrap.indent(pip_script, "  ")}
        fi
        exec {sys.executable} -S "$@"
        """))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return root


def run_setup(root: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/setup.sh", "--cpu-torch"], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_set_up_names_the_unreachable_cpu_index_first_in_one_line(tmp_path):
    pip_output = tmp_path / "pip.out"
    pip_output.write_text(UNREACHABLE_PIP)
    root = fake_setup_tree(tmp_path, f'cat {pip_output}; exit 1')
    done = run_setup(root)
    assert done.returncode == 1
    errors = done.stderr.splitlines()
    assert "CPU wheel index" in errors[0] and "could not be reached" in errors[0] and "PIP_FIND_LINKS" in errors[0]
    assert "Traceback" not in done.stderr
    conflict = next(i for i, line in enumerate(errors) if "conflicting dependencies" in line)
    assert conflict > 0  # pip's misleading line comes after the cause, as reference
    assert any("PIP_FIND_LINKS=DIR bash scripts/setup.sh" in line for line in errors)


def test_set_up_without_a_matching_wheel_says_so_rather_than_blaming_the_network(tmp_path):
    pip_output = tmp_path / "pip.out"
    pip_output.write_text("ERROR: Could not find a version that satisfies the requirement torch (from versions: none)\n")
    root = fake_setup_tree(tmp_path, f'cat {pip_output}; exit 1')
    done = run_setup(root)
    assert done.returncode == 1
    first = done.stderr.splitlines()[0]
    assert "offers" in first and "could not be reached" not in first


def test_set_up_prints_progress_while_pip_works(tmp_path):
    # pip takes 4 s and says what it collects; with a 1 s interval set-up shows its latest line as it goes
    root = fake_setup_tree(tmp_path, 'echo "Collecting torch"; sleep 2; echo "  Downloading torch-9.whl (200 MB)"; '
                                     'sleep 2; exit 1')
    done = run_setup(root, NANOSERVE_SETUP_PROGRESS_S="1")
    progress = [line for line in done.stdout.splitlines() if line.startswith("set-up:   ... ")]
    assert len(progress) >= 3
    assert any("Downloading torch-9.whl" in line for line in progress)


# ---- run_course.py: a stamp of the tracked inputs, numbered lines, the total time -------------------------
def run_course_module():
    spec = importlib.util.spec_from_file_location("run_course_under_test", REPO / "scripts" / "run_course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(root: Path, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def course_repo(tmp_path, monkeypatch):
    """A tiny git work tree with a chapter and committed benchmark results, and run_course.py pointed at it."""
    root = tmp_path / "repo"
    (root / "chapters").mkdir(parents=True)
    (root / "chapters" / "00_x.ipynb").write_text("{}")
    (root / "benchmarks" / "results").mkdir(parents=True)
    (root / "benchmarks" / "results" / "r.json").write_text("{}")
    (root / ".gitignore").write_text("benchmarks/runs/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "start")
    rc = run_course_module()
    monkeypatch.setattr(rc, "REPO", root)
    monkeypatch.setattr(rc, "HASHED", ("chapters", "benchmarks", "pyproject.toml"))
    return rc, root


@pytest.mark.skipif(not HAS_GIT, reason="needs git")
def test_a_benchmark_run_written_into_the_tree_keeps_the_course_stamp(course_repo):
    rc, root = course_repo
    first = rc.inputs_hash()
    runs = root / "benchmarks" / "runs"  # the README's nanobench serve example writes here
    runs.mkdir()
    (runs / "cpu-smoke-2026_random_nanoserve.json").write_text('{"tok_s": 1}')
    (root / "chapters" / "scratch.txt").write_text("not tracked")  # untracked files do not count either
    assert rc.inputs_hash() == first


@pytest.mark.skipif(not HAS_GIT, reason="needs git")
def test_an_edit_to_a_tracked_file_invalidates_the_course_stamp(course_repo):
    rc, root = course_repo
    first = rc.inputs_hash()
    (root / "chapters" / "00_x.ipynb").write_text('{"cells": []}')  # uncommitted: the working tree counts
    second = rc.inputs_hash()
    assert second != first
    (root / "benchmarks" / "results" / "r.json").unlink()  # a tracked file deleted
    assert rc.inputs_hash() not in (first, second)
    (root / "pyproject.toml").write_text("")
    before_add = rc.inputs_hash()
    git(root, "add", "pyproject.toml")  # once tracked, it counts
    assert rc.inputs_hash() != before_add


def test_chapter_lines_are_numbered_and_the_run_reports_its_total_time(tmp_path, monkeypatch, capsys):
    rc = run_course_module()
    chapters = []
    for name in ("00_a.ipynb", "01_b.ipynb", "02_c.ipynb"):
        chapters.append(tmp_path / name)
        chapters[-1].write_text("{}")

    class FakeNb:
        CHAPTERS = tmp_path

        @staticmethod
        def chapter_paths():
            return chapters

        runs = {}

        @staticmethod
        def execute(path, cwd):
            FakeNb.runs[path.name] = FakeNb.runs.get(path.name, 0) + 1
            if path.name == "01_b.ipynb":
                raise RuntimeError("ValueError: broken on purpose")
            if path.name == "02_c.ipynb" and FakeNb.runs[path.name] == 1:
                raise RuntimeError("ValueError: fails once")

    class NoFigures:
        @staticmethod
        def course_run_check(copy, name):
            return []

    monkeypatch.setattr(rc, "load_nb_tool", lambda: FakeNb)
    monkeypatch.setattr(rc, "load_figures_tool", lambda: NoFigures)
    monkeypatch.setattr(rc, "inputs_hash", lambda: "0" * 16)
    monkeypatch.setattr(rc, "STAMP_DIR", tmp_path / "no-venv")
    assert rc.main([]) == 1
    lines = [l for l in capsys.readouterr().out.splitlines() if not l.startswith("    ")]  # tracebacks indented
    assert lines[1].startswith("[1/3] ok   00_a.ipynb")
    assert [l[:30] for l in lines[2:5]] == ["[2/3] run 1 of 01_b.ipynb fail", "[2/3] run 2 of 01_b.ipynb fail",
                                             "[2/3] FAIL 01_b.ipynb (0.0 s):"]
    assert "broken on purpose" in lines[4]
    assert lines[5].startswith("[3/3] run 1 of 02_c.ipynb failed: ValueError: fails once")
    assert lines[6].startswith("[3/3] ok   02_c.ipynb")  # passed when run again, and named as flaky below
    assert lines[7] == "FLAKY (failed once, passed when run again) 02_c.ipynb: ValueError: fails once"
    assert FakeNb.runs == {"00_a.ipynb": 1, "01_b.ipynb": 2, "02_c.ipynb": 2}
    assert re.fullmatch(r"1 of 3 chapters failed in \d+ s: 01_b.ipynb", lines[-1])


def test_durations_read_as_minutes_and_seconds():
    rc = run_course_module()
    assert rc.format_seconds(42.4) == "42 s"
    assert rc.format_seconds(859) == "14 min 19 s"


def test_run_course_sh_prints_the_total_time_of_the_whole_script():
    text = (REPO / "scripts" / "run_course.sh").read_text()
    assert "in all, set-up included" in text and "exec " not in text


# ---- lab.sh: the repository root, so the README's chapters/... links are what the learner sees -------------
def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None, reason="needs jupyterlab")
def test_lab_sh_serves_the_repository_root_and_opens_the_tour(tmp_path):
    import json
    import signal
    import time
    import urllib.request

    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    (root / "chapters").mkdir()
    shutil.copy(REPO / "scripts" / "lab.sh", root / "scripts" / "lab.sh")
    (root / "scripts" / "setup.sh").write_text("echo 'set-up: .venv is up to date'\n")  # set-up is tested above
    shutil.copy(REPO / "chapters" / "00_tour.ipynb", root / "chapters" / "00_tour.ipynb")
    (root / ".venv" / "bin").mkdir(parents=True)
    jupyter = root / ".venv" / "bin" / "jupyter"
    jupyter.write_text(f'#!/usr/bin/env bash\nshift\nexec {sys.executable} -m jupyterlab "$@"\n')  # `jupyter lab ...`
    jupyter.chmod(0o755)
    port, token = free_port(), "first-hour"
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(["bash", "scripts/lab.sh", "--no-browser", f"--port={port}",
                             f"--IdentityProvider.token={token}", "--LabApp.check_for_updates_class="
                             "jupyterlab.NeverCheckForUpdate"], cwd=root, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")})
    try:
        def get(path):
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                             headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(request, timeout=10) as reply:
                return json.loads(reply.read())

        deadline = time.monotonic() + 120
        while True:
            try:
                listing = get("/api/contents?content=1")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((tmp_path / "lab.log").read_text()[-2000:])
                time.sleep(0.5)
        assert {"chapters", "scripts"} <= {item["name"] for item in listing["content"]}
        assert get("/api/contents/chapters/00_tour.ipynb?content=0")["type"] == "notebook"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
    said = (tmp_path / "lab.log").read_text()
    assert "opens chapters/00_tour.ipynb" in said


# ---- nanobench: per-user paths, and a folder it cannot write is one line -----------------------------------
def test_the_cpu_smoke_preset_lives_in_this_users_cache(monkeypatch, tmp_path):
    import tempfile

    from nanobench.checks import cache_dir, smoke_root

    monkeypatch.delenv("NANOSERVE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert smoke_root() == tmp_path / "home" / ".cache" / "nanoserve" / "cpu-smoke"
    assert not str(smoke_root()).startswith(tempfile.gettempdir() + os.sep + "nanoserve")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "nanoserve"
    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "mine"))
    assert smoke_root() == tmp_path / "mine" / "cpu-smoke"


def blocked_cache(tmp_path) -> Path:
    """A cache path no one can write, root included: it runs through a regular file."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "cache"


def test_a_cache_it_cannot_write_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    import nanobench.cli as bench

    monkeypatch.setenv("NANOSERVE_CACHE", str(blocked_cache(tmp_path)))
    assert bench.main(["--preset", "cpu-smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("python -m nanobench: error: the cpu-smoke preset cannot write its model into ")
    assert "NANOSERVE_CACHE" in err


def test_another_users_folder_is_reported_as_permission_denied(tmp_path, monkeypatch, capsys):
    # a folder the current user cannot write (mode bits do not stop root, so the refusal is simulated)
    import tempfile

    import nanobench.cli as bench

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setenv("NANOSERVE_CACHE", str(tmp_path / "theirs"))
    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    assert bench.main(["--preset", "cpu-smoke"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(Permission denied)" in err


def test_an_out_folder_it_cannot_write_is_refused_before_any_engine_is_built(tmp_path, capsys):
    import nanobench.cli as bench

    out = blocked_cache(tmp_path)
    rc = bench.main(["--engine", "nanoserve", "--workload", "random", "--model", str(tmp_path / "model"),
                     "--out", str(out), "--device", "cpu", "--num-requests", "2"])
    said = capsys.readouterr()
    err = said.err
    assert rc == 2 and "[bench]" not in said.out  # no engine was built
    assert err == (f"python -m nanobench: error: --out {out}: cannot write there ({tmp_path / 'a-file'} is a file, "
                   "not a folder): pass --out with a folder you can write\n")


def test_a_subcommand_given_a_missing_file_is_one_line_and_exit_1(tmp_path, capsys):
    import nanobench.cli as bench

    assert bench.main(["unpack", str(tmp_path / "no-such-bundle.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No such file or directory" in err and "Traceback" not in err


def test_python_m_nanobench_as_a_second_user_prints_no_traceback(tmp_path):
    env = {**os.environ, "NANOSERVE_CACHE": str(blocked_cache(tmp_path))}
    done = subprocess.run([sys.executable, "-m", "nanobench", "--preset", "cpu-smoke"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


# ---- nanoserve serve: every mistake a user can make is one line and a non-zero exit -----------------------
def nanoserve(*argv, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "nanoserve.serve", *argv], capture_output=True, text=True,
                          env=env, timeout=timeout)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


needs_serve = pytest.mark.skipif(importlib.util.find_spec("uvicorn") is None, reason="needs the serve extra")


@needs_serve
def test_serve_with_a_model_path_that_does_not_exist_is_one_line(tmp_path):
    done = nanoserve("serve", str(tmp_path / "no-such" / "model"), "--port", "0")
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("nanoserve serve: error: cannot find model ") and "no-such" in line


@needs_serve
def test_serve_on_a_taken_port_is_one_line_before_the_model_loads(tmp_path):
    import socket
    import time

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        start = time.monotonic()
        done = nanoserve("serve", str(tmp_path / "never-loaded"), "--port", str(port))
    assert done.returncode == 1
    assert one_error_line(done) == (f"nanoserve serve: error: cannot listen on 127.0.0.1:{port} (Address already in "
                                    "use): pass --port with a free port (another server may hold this one) or a "
                                    "--host of this machine")
    assert time.monotonic() - start < 60


@needs_serve
def test_serve_with_a_chat_template_file_that_does_not_exist_is_one_line(tmp_path):
    done = nanoserve("serve", str(tmp_path / "m"), "--port", "0", "--chat-template", str(tmp_path / "t.jinja"))
    assert done.returncode == 1
    assert one_error_line(done).startswith(f"nanoserve serve: error: --chat-template {tmp_path / 't.jinja'}: ")


@pytest.mark.parametrize("argv", [["serve", "m", "--port", "70000"], ["serve", "m", "--max-num-seqs", "many"],
                                  ["serve", "m", "--no-such-flag"], ["serve"]])
def test_serve_with_bad_flags_is_a_usage_error(argv):
    done = nanoserve(*argv)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("nanoserve serve: error: ")


# ---- the README: where to start, distinct ports, per-user paths, what test.sh does -----------------------
README = (REPO / "README.md").read_text()


def test_readme_says_where_to_start_after_set_up():
    start = next(p for p in README.split("\n\n") if p.startswith("**Start here"))
    assert "bash scripts/lab.sh" in start and "chapters/00_tour.ipynb" in start


def test_readme_chapter_links_are_paths_from_the_root_lab_sh_serves():
    links = re.findall(r"\]\((chapters/[^)]+\.ipynb)\)", README)
    assert len(links) >= 25
    assert all((REPO / link).is_file() for link in links)
    assert "--ServerApp.root_dir=\"$PWD\"" in (REPO / "scripts" / "lab.sh").read_text()


def test_readme_serves_the_book_and_nanoserve_on_different_ports():
    book = re.findall(r"http\.server -d build/book/html -b 127\.0\.0\.1 (\d+)", README)
    served = set(re.findall(r"nanoserve serve .*--port (\d+)", README))
    clients = set(re.findall(r"(?:base_url=\"|--base-url )http://127\.0\.0\.1:(\d+)", README))
    assert book and served and not set(book) & served
    assert clients == served  # the OpenAI client and nanobench serve talk to the server started above


def test_readme_writes_no_fixed_path_in_the_shared_temp_dir():
    assert "gettempdir()" not in README and "/tmp/" not in README


def test_readme_describes_the_book_stage_of_test_sh():
    described = next(p for p in README.split("\n\n") if "`test.sh` checks that" in p)
    assert "build_book.sh" in described and "Sphinx" in described


def offline_snippet() -> str:
    return next(block for block in re.findall(r"```python\n(.*?)```", README, flags=re.S)
                if "make_tiny_checkpoint" in block)


def test_readme_offline_snippet_writes_into_the_users_own_cache(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run([sys.executable, "-c", offline_snippet()], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={**os.environ, "HOME": str(home), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    model = home / ".cache" / "nanoserve" / "tiny-qwen3"
    assert f"checkpoint: {model}" in done.stdout and (model / "config.json").is_file()


# ---- test.sh: every stage runs, each header gives the time so far, the last line the total ----------------
def stub_test_tree(tmp_path: Path, python_body: str) -> Path:
    """scripts/test.sh with stand-ins for set-up, the venv's python and the book build."""
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "test.sh", root / "scripts" / "test.sh")
    (root / "scripts" / "setup.sh").write_text("echo 'set-up: .venv is up to date'\n")
    (root / "scripts" / "build_book.sh").write_text("echo 'build_book: 25 chapter pages'\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    python = root / ".venv" / "bin" / "python"
    python.write_text(f"#!/usr/bin/env bash\n{python_body}\n")
    python.chmod(0o755)
    return root


def test_test_sh_reports_each_stage_and_its_total_time(tmp_path):
    root = stub_test_tree(tmp_path, 'echo "python $*"; exit 0')
    done = subprocess.run(["bash", "scripts/test.sh"], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    headers = [line for line in done.stdout.splitlines() if line.startswith("== ")]
    assert len(headers) == 5 and all(re.search(r"\[\d+ s\]$", h) for h in headers)
    assert any("the book" in h for h in headers)
    assert re.fullmatch(r"test\.sh: all checks passed in \d+ s, set-up included", done.stdout.splitlines()[-1])


def test_test_sh_runs_every_stage_and_names_the_ones_that_failed(tmp_path):
    root = stub_test_tree(tmp_path, '[[ "$*" == *run_course.py* ]] && exit 1; exit 0')
    done = subprocess.run(["bash", "scripts/test.sh"], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "== pytest" in done.stdout  # the stages after the failed one still ran
    assert re.fullmatch(r"test\.sh: FAILED after \d+ s: run_course\.py", done.stdout.splitlines()[-1])
