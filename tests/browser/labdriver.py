"""Drive the course in a real JupyterLab with headless chromium, as a learner would."""
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / ".browser_screenshots"
VIEWPORT = {"width": 1280, "height": 900}
MAX_SHOT_HEIGHT = 16000  # chromium cannot capture taller images

# JupyterLab user settings for the test server: no news/update toasts over the page, and every
# cell kept in the DOM so widgets can be found and the whole notebook captured in one image
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings":
        {"windowingMode": "none", "scrollPastEnd": False},
}


def missing_stack():
    """Why the browser stack cannot run here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed in this Python (pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "jupyterlab is not installed in this Python"
    return None


def chapters_source():
    """The chapters folder to serve: chapters/, or $BROWSER_TEST_CHAPTERS (e.g. a copy with a failing cell)."""
    return Path(os.environ.get("BROWSER_TEST_CHAPTERS") or REPO / "chapters")


# what the chapters read beside chapters/: ../benchmarks/results (08-10, 12, 17), ../scripts (09), and chapter 14
# finds the repository root by its pyproject.toml
BESIDE_CHAPTERS = ("benchmarks", "scripts", "pyproject.toml")


def copy_chapters(dst):
    """Copy chapters/ (with recordings/) and what it reads beside it into dst; return the chapters copy."""
    dst = Path(dst)
    skip = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    for name in BESIDE_CHAPTERS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, dst / name, ignore=skip)
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, dst / name)
    shutil.copytree(chapters_source(), dst / "chapters", ignore=skip)
    return dst / "chapters"


def free_port():
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A JupyterLab server on 127.0.0.1 serving root_dir, started and stopped by pid."""

    def __init__(self, root_dir, work_dir, start_timeout=180):
        self.root_dir, self.work = Path(root_dir), Path(work_dir)
        self.start_timeout = start_timeout
        self.port, self.token = free_port(), secrets.token_hex(16)
        self.proc = None
        self.log_path = self.work / "jupyterlab.log"

    def url(self, path=""):
        """Address of path on this server, with the token."""
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def _write_settings(self):
        """Write LAB_SETTINGS into a settings folder of our own; return it."""
        settings = self.work / "lab-settings"
        for rel, values in LAB_SETTINGS.items():
            f = settings / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(values))
        return settings

    def start(self):
        """Start jupyter lab and wait until its REST API answers."""
        settings = self._write_settings()
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root_dir}",
               f"--LabApp.user_settings_dir={settings}", f"--LabApp.workspaces_dir={self.work / 'workspaces'}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers often run as root
            cmd.append("--allow-root")
        env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(self.work / "runtime"), PYTHONUNBUFFERED="1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.root_dir)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with direct.open(self.url("api/status"), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"jupyter lab did not answer in {self.start_timeout} s:\n{self.log_tail()}")

    def stop(self):
        """Stop the server (it shuts its kernels down) by its pid; kill it if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def log_tail(self, n=40):
        """Last n lines of the server log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


@contextmanager
def course_in_lab(start_timeout=180):
    """Yield (server, browser) for a copy of chapters/ served by JupyterLab, cleaning everything up."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="nanoserve-lab-") as tmp:
        root = copy_chapters(tmp)
        server = LabServer(root, tmp, start_timeout)
        try:
            server.start()
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
                try:
                    yield server, browser
                finally:
                    browser.close()
        finally:
            server.stop()


# JavaScript run in the page; window.jupyterapp exists because of expose_app_in_browser
JS_FIND_PANEL = """(name) => {
  const app = window.jupyterapp;
  if (!app) return false;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === name && w.content && w.content.model) { window.__nb = w; return true; }
  }
  return false;
}"""
JS_KERNEL_IDLE = """() => {
  const k = window.__nb.sessionContext.session?.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""
JS_RUN_ALL = """() => {
  const app = window.jupyterapp;
  app.shell.activateById(window.__nb.id);
  window.__runAll = {done: false, error: null};
  app.commands.execute('notebook:clear-all-cell-outputs')
    .then(() => app.commands.execute('notebook:run-all-cells'))
    .then(() => { window.__runAll.done = true; },
          (e) => { window.__runAll.done = true; window.__runAll.error = String(e); });
}"""
JS_FINISHED = """() => {
  if (!window.__runAll.done) return false;
  const busy = [...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'));
  const k = window.__nb.sessionContext.session?.kernel;
  return !k || k.status === 'dead' || (!busy && k.status === 'idle');
}"""


class Chapter:
    """One notebook open in its own browser page."""

    def __init__(self, server, browser, name):
        self.name, self.stem = name, Path(name).stem
        self.page = browser.new_page(viewport=VIEWPORT)
        self.page.goto(server.url(f"lab/workspaces/{self.stem}/tree/{name}"))

    def wait_for_kernel(self, timeout_s=120):
        """Wait until the notebook is open and its kernel is connected and idle."""
        self.page.wait_for_function(JS_FIND_PANEL, arg=self.name, timeout=timeout_s * 1000, polling=500)
        self.page.wait_for_function(JS_KERNEL_IDLE, timeout=timeout_s * 1000, polling=500)

    def run_all(self, timeout_s=600):
        """Clear outputs, Run All Cells, wait until no cell is queued or running; return seconds taken."""
        start = time.monotonic()
        self.page.evaluate(JS_RUN_ALL)
        self.page.wait_for_function(JS_FINISHED, timeout=timeout_s * 1000, polling=500)
        failure = self.page.evaluate("""() => window.__runAll.error ||
            document.querySelector('.jp-Dialog')?.innerText.replace(/\\s+/g, ' ').trim() ||
            (['dead', 'restarting', 'autorestarting', 'unknown'].includes(
                window.__nb.sessionContext.session?.kernel?.status ?? 'dead') ? 'the kernel died' : null)""")
        if failure:
            raise RuntimeError(f"{self.name}: Run All failed in the page: {failure}")
        return time.monotonic() - start

    def notebook(self):
        """The notebook as JupyterLab holds it now (nbformat JSON)."""
        return self.page.evaluate("() => window.__nb.content.model.toJSON()")

    def error_outputs(self):
        """Error outputs (not stderr streams) as dicts: cell index, tags, ename, evalue."""
        found = []
        for i, cell in enumerate(self.notebook()["cells"]):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    found.append({"cell": i, "tags": cell.get("metadata", {}).get("tags", []),
                                  "ename": out.get("ename", ""), "evalue": out.get("evalue", "")})
        return found

    def unexecuted_cells(self):
        """Indices of non-empty code cells that have no execution count (Run All stops at an error)."""
        return [i for i, c in enumerate(self.notebook()["cells"])
                if c["cell_type"] == "code" and "".join(c["source"]).strip() and c.get("execution_count") is None]

    def view_of(self, selector):
        """Text and image sources of the first element matching selector: what a learner sees there."""
        return self.page.locator(selector).first.evaluate(
            "n => n.innerText + [...n.querySelectorAll('img')].map(i => i.src).join()")

    def wait_for_change(self, selector, before, timeout_s=60):
        """Wait until view_of(selector) differs from before; return the new view."""
        self.page.wait_for_function(
            """([sel, before]) => { const n = document.querySelector(sel);
                 return !!n && n.innerText + [...n.querySelectorAll('img')].map(i => i.src).join() !== before; }""",
            arg=[selector, before], timeout=timeout_s * 1000, polling=250)
        return self.view_of(selector)

    def output_text(self):
        """All text in the notebook's output areas."""
        return self.page.evaluate(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')].map(n => n.innerText).join('\\n')")

    def screenshot(self, label, whole_notebook=False):
        """Save PNGs under .browser_screenshots/; whole_notebook grows the viewport to show every cell.

        A notebook taller than chromium can capture comes out in parts (-1, -2, ...). Returns the paths.
        """
        SHOTS.mkdir(exist_ok=True)
        for stale in [*SHOTS.glob(f"{self.stem}-{label}.png"), *SHOTS.glob(f"{self.stem}-{label}-[0-9]*.png")]:
            stale.unlink()  # an earlier run may have left a different number of parts
        if not whole_notebook:
            path = SHOTS / f"{self.stem}-{label}.png"
            self.page.screenshot(path=str(path))
            return [path]
        scroller = self.page.locator(".jp-NotebookPanel-notebook .jp-WindowedPanel-outer").first
        height = VIEWPORT["height"]
        for _ in range(3):  # the notebook can grow a little at a new size (outputs re-lay out)
            total, seen = scroller.evaluate("s => [s.scrollHeight, s.clientHeight]")
            if total <= seen or height >= MAX_SHOT_HEIGHT:
                break
            height = min(height + total - seen, MAX_SHOT_HEIGHT)
            self.page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
            self.page.wait_for_timeout(500)  # let the layout settle at the new size
        total, seen = scroller.evaluate("s => [s.scrollHeight, s.clientHeight]")
        paths = []
        tops = list(range(0, total - seen, seen)) + [max(total - seen, 0)]  # the last part ends at the bottom
        for part, top in enumerate(tops, start=1):
            scroller.evaluate("(s, top) => { s.scrollTop = top; }", top)
            self.page.wait_for_timeout(200)
            suffix = f"-{part}" if len(tops) > 1 else ""
            paths.append(SHOTS / f"{self.stem}-{label}{suffix}.png")
            self.page.screenshot(path=str(paths[-1]))
        scroller.evaluate("s => { s.scrollTop = 0; }")
        self.page.set_viewport_size(VIEWPORT)
        return paths

    def save(self):
        """Save the notebook as JupyterLab holds it (outputs and metadata) to its file."""
        self.page.evaluate("() => window.__nb.context.save()")

    def widget_errors(self):
        """Text of every error or traceback shown inside a widget's output area."""
        return self.page.evaluate("""() => [...document.querySelectorAll('.widget-output')]
            .flatMap(o => [...o.querySelectorAll('[data-mime-type="application/vnd.jupyter.error"], .jp-RenderedText')])
            .map(n => n.innerText).filter(t => /Traceback|Error:/.test(t))""")

    def close(self):
        """Shut the kernel down and close the page (once: a test may close a chapter before its fixture does)."""
        if self.page.is_closed():
            return
        try:
            self.page.evaluate("() => window.__nb && window.__nb.sessionContext.shutdown()")
        finally:
            self.page.close()


def describe_errors(errors):
    """Readable lines for error outputs, pointing out gpu-tagged cells and CUDA errors on a CPU."""
    lines = []
    for e in errors:
        first = e["evalue"].splitlines()[0] if e["evalue"] else ""
        tags = f" {e['tags']}" if e["tags"] else ""
        hint = ""
        if {"gpu", "multigpu"} & set(e["tags"]):
            hint = "  <- a cell tagged gpu failed without a GPU; it should show its recorded output"
        elif "CUDA" in first:
            hint = "  <- a CUDA error in a cell not tagged gpu"
        lines.append(f"cell {e['cell']}{tags}: {e['ename']}: {first}{hint}")
    return lines


# --- the rendered book (tests/browser/test_book.py): a static server and a browser, no JupyterLab ---

def missing_browser():
    """Why headless chromium cannot be driven here, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed in this Python (pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    return None


class StaticSite:
    """Python's http.server on 127.0.0.1 serving a folder, started and stopped by pid."""

    def __init__(self, root_dir, start_timeout=30):
        self.root_dir, self.start_timeout = Path(root_dir), start_timeout
        self.port, self.proc = free_port(), None

    def url(self, path=""):
        """Address of path on this server."""
        return f"http://127.0.0.1:{self.port}/{path}"

    def start(self):
        """Start the server and wait until it answers."""
        cmd = [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
               "--directory", str(self.root_dir)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"http.server exited with {self.proc.returncode}")
            try:
                with direct.open(self.url(), timeout=5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"http.server did not answer in {self.start_timeout} s")

    def stop(self):
        """Stop the server by its pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextmanager
def site_in_browser(root_dir):
    """Yield (site, browser) for a static folder served on 127.0.0.1, cleaning everything up."""
    from playwright.sync_api import sync_playwright

    site = StaticSite(root_dir).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
            try:
                yield site, browser
            finally:
                browser.close()
    finally:
        site.stop()
