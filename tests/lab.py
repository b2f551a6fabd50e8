"""A harness for driving the stage notebooks in a real JupyterLab, in headless Chromium, as a researcher
would: open a notebook, restart and run all, wait, read the outputs, move ipywidgets controls.

Two parts, used together:

- `jupyter_lab(root)`: a context manager that starts `jupyter lab --no-browser` from this venv on a
  free port with a random token, serving `root`, with temporary Jupyter config / data / runtime
  dirs (the user's own settings and extensions stay out; the news prompt, autosave, the kernel
  restart dialog and cell windowing are switched off), and stops it and every process it started
  on exit. It yields a `LabServer`, which also lists the processes the server's kernels started.
- `open_lab(server)`: a context manager launching Debian's Chromium through Playwright (no browser
  download: `executable_path=/usr/bin/chromium`) and yielding `Lab`, a page object whose methods
  are the things a test does: `open`, `run_all`, `wait_idle`, `errors`, `state`, `cell`, `text`,
  `wait_for`, `screenshot`, `close`, and for ipywidgets `widget`, `set_slider`, `step_slider`,
  `slider_value`, `select_dropdown`, `dropdown_options`.

`LabServer.watch_processes()` records every process started under the server while a block runs
(`.started`, `.engine_servers`), `LabServer.processes()` / `kernel_processes(server)` what runs now:
a test can assert that re-running a notebook started no engine server.

The page is driven through JupyterLab's own command registry (`window.jupyterapp`, exposed with
`--LabApp.expose_app_in_browser`, as JupyterLab's own Galata tests do): command ids are stable
across JupyterLab 4 releases where menu labels and DOM details are not. Outputs are read from the
notebook model, because the DOM renders an error traceback and a stderr stream alike (both as
`application/vnd.jupyter.stderr`); widgets are driven through the DOM, by the CSS class a notebook
gives them with ipywidgets' `add_class`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("KIT_TEST_ARTIFACTS", REPO / "outputs" / "test-artifacts")) / "lab"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    # what this machine's Chromium needs (see the environment notes): no sandbox as root, no GPU,
    # and no background connections, which the closed network refuses many at a time
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ENGINE_SERVER = re.compile(
    r"transformers\.cli\.transformers|transformers\s+serve|sglang\.launch_server|sglang\s+serve"
    r"|vllm\.entrypoints|vllm\s+serve|\bvllm\b.*\bserve\b|uvicorn|api_server"
)
"""Command lines of an inference engine's server (what stage 2 and 3 start), as psutil sees them."""
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

LAB_SETTINGS: dict[str, dict[str, Any]] = {
    # no "Would you like to receive official Jupyter news?" toast, no update check (no network here)
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    # restart-and-run-all without the "Restart Kernel?" dialog
    "@jupyterlab/apputils-extension:sessionDialogs": {"skipKernelRestartDialog": True},
    # every cell attached to the DOM, so selectors find cells below the fold
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    # the notebook file on disk stays as the run left it
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server retries the next ones if it is taken meanwhile)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class ProcInfo:
    """One process as seen while it ran: enough to say what it was after it is gone."""

    pid: int
    ppid: int
    name: str
    cmdline: str

    @property
    def is_engine_server(self) -> bool:
        """Whether this looks like an inference engine's server (transformers serve, vLLM, SGLang...)."""
        return bool(ENGINE_SERVER.search(self.cmdline))


def _info(p: psutil.Process) -> ProcInfo | None:
    try:
        with p.oneshot():
            return ProcInfo(p.pid, p.ppid(), p.name(), " ".join(p.cmdline()))
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


@dataclass
class LabServer:
    """A running `jupyter lab` (see `jupyter_lab`): its address, token, root and process."""

    url: str
    token: str
    root: Path
    process: subprocess.Popen
    log: Path
    home: Path

    def api(self, path: str, method: str = "GET", timeout: float = 10) -> Any:
        """JSON from the server's REST API at `path` (e.g. "api/sessions")."""
        req = urllib.request.Request(
            self.url + path.lstrip("/"), method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def processes(self) -> list[ProcInfo]:
        """Every process the server started that runs now: kernels and what they started, recursively."""
        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [i for i in map(_info, children) if i is not None]

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log (stdout and stderr), for failure messages."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    @contextlib.contextmanager
    def watch_processes(self, interval: float = 0.1) -> Iterator[ProcessWatch]:
        """Record every process the server's kernels start while the block runs (a thread polls the
        process tree every `interval` s: an engine server lives for seconds, far longer)."""
        watch = ProcessWatch(self, interval)
        watch.start()
        try:
            yield watch
        finally:
            watch.stop()


@dataclass
class ProcessWatch:
    """Processes seen under a `LabServer` during a `watch_processes` block (those running at its
    start are left out, so `started` is what the block caused)."""

    server: LabServer
    interval: float
    before: set[int] = field(default_factory=set)
    seen: dict[int, ProcInfo] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        """Note what runs now, then poll in a daemon thread."""
        self.before = {p.pid for p in self.server.processes()}
        self._thread = threading.Thread(target=self._poll, name="lab-process-watch", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while True:
            for p in self.server.processes():
                if p.pid not in self.before:
                    self.seen.setdefault(p.pid, p)
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        """Stop polling (one last look included)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def started(self) -> list[ProcInfo]:
        """Processes that appeared under the server during the block, in the order they were seen."""
        return list(self.seen.values())

    @property
    def engine_servers(self) -> list[ProcInfo]:
        """The started processes that look like an inference engine's server."""
        return [p for p in self.started if p.is_engine_server]


def _write_settings(settings_dir: Path, settings: dict[str, dict[str, Any]]) -> None:
    """JupyterLab user settings, one file per plugin id ("@scope/pkg:plugin"), as its editor writes them."""
    for plugin, values in settings.items():
        package, name = plugin.rsplit(":", 1)
        target = settings_dir / package / f"{name}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values, indent=2))


def _stop(server: LabServer, grace: float = 15) -> None:
    """Shut the server down (it stops its kernels), then end whatever it started that is left."""
    family: list[psutil.Process] = []  # the server's descendants: kernels, and what they started
    with contextlib.suppress(psutil.Error):
        family = psutil.Process(server.process.pid).children(recursive=True)
    with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
        server.api("api/shutdown", method="POST", timeout=5)
    try:
        server.process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        server.process.terminate()
        try:
            server.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait(timeout=5)
    for p in family:  # kernels and engines the server's shutdown did not take down
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(family, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


@contextlib.contextmanager
def jupyter_lab(
    root: Path,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    settings: dict[str, dict[str, Any]] | None = None,
) -> Iterator[LabServer]:
    """A real `jupyter lab --no-browser` from this venv serving `root`, ready (/api/status answers)
    when the block starts, stopped with its kernels and their processes when it ends.

    Jupyter's config, data and runtime dirs, IPython's dir and JupyterLab's user settings and
    workspaces are temporary, so nothing of the user's own setup leaks in; `settings` are added to
    LAB_SETTINGS (plugin id -> values). `env` adds to the server's (and so the kernels') environment.
    """
    home = Path(tempfile.mkdtemp(prefix="kit-lab-"))
    token = secrets.token_hex(24)
    dirs = {
        "JUPYTER_CONFIG_DIR": home / "config",
        "JUPYTER_DATA_DIR": home / "data",
        "JUPYTER_RUNTIME_DIR": home / "runtime",
        "IPYTHONDIR": home / "ipython",
        "JUPYTERLAB_SETTINGS_DIR": home / "config" / "lab" / "user-settings",
        "JUPYTERLAB_WORKSPACES_DIR": home / "config" / "lab" / "workspaces",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    _write_settings(dirs["JUPYTERLAB_SETTINGS_DIR"], {**LAB_SETTINGS, **(settings or {})})
    server_env = {k: v for k, v in os.environ.items() if k not in {"JUPYTER_PATH", "JUPYTER_CONFIG_PATH"}}
    server_env.update({k: str(v) for k, v in dirs.items()}, **(env or {}))
    server_env.pop("KIT_PROGRESS", None)  # `kit run` sets text bars for papermill; a lab user gets widgets
    port = free_port()
    cmd = [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",  # ServerApp.token is its deprecated alias
        f"--ServerApp.root_dir={root}",
        "--LabApp.extension_manager=readonly",  # no PyPI lookups from the extension manager
        "--LabApp.expose_app_in_browser=True",
        # no news feed and no update check at all (the network is closed here anyway)
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI containers and this machine run as root: refused without it
    log = home / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, env=server_env, stdout=out, stderr=subprocess.STDOUT, cwd=root)
    server = LabServer(f"http://127.0.0.1:{port}/", token, root, process, log, home)
    try:
        server = _wait_ready(server, dirs["JUPYTER_RUNTIME_DIR"], timeout)
        yield server
    finally:
        _stop(server)
        shutil.rmtree(home, ignore_errors=True)


def _wait_ready(server: LabServer, runtime: Path, timeout: float) -> LabServer:
    """The server once /api/status answers, at the port it really bound (its runtime file says)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited ({server.process.returncode}):\n{server.log_tail()}")
        for info in runtime.glob(f"jpserver-{server.process.pid}.json"):
            with contextlib.suppress(ValueError, OSError):
                server.url = json.loads(info.read_text())["url"].rstrip("/") + "/"
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            server.api("api/status", timeout=2)
            return server
        time.sleep(0.2)
    raise TimeoutError(f"jupyter lab did not answer /api/status within {timeout:.0f} s:\n{server.log_tail()}")


def kernel_processes(server: LabServer) -> list[ProcInfo]:
    """What the server's kernels started and that runs now (psutil, recursively): the server's
    descendants but its direct children (the kernels themselves)."""
    return [p for p in server.processes() if p.ppid != server.process.pid]


# ---------------------------------------------------------------------------------------------
# The browser side

_FIND_PANEL = """
const findPanel = (path) => {
  const app = window.jupyterapp;
  for (const w of Array.from(app.shell.widgets('main'))) {
    if (w.context && w.context.path === path && w.content && w.sessionContext) return w;
  }
  return null;
};
"""

_STATE_JS = (
    "(path) => {"
    + _FIND_PANEL
    + """
  const panel = findPanel(path);
  if (!panel) return {found: false};
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.map((cell, index) => {
    const m = cell.model;
    if (m.type !== 'code') return {index, type: m.type};
    const outputs = [];
    for (let i = 0; i < m.outputs.length; i++) outputs.push(m.outputs.get(i).toJSON());
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    return {
      index, type: 'code', empty: m.sharedModel.getSource().trim() === '',
      count: m.executionCount, running: m.executionState === 'running'
        || (prompt !== null && prompt.textContent.includes('[*]')),
      errors: outputs.filter(o => o.output_type === 'error')
        .map(o => ({ename: o.ename, evalue: o.evalue, traceback: (o.traceback || []).join('\\n')})),
    };
  });
  return {found: true, kernel: kernel ? kernel.status : 'none', cells};
}"""
)

_DONE_JS = (
    "([path, state]) => {"
    + _FIND_PANEL
    + """
  const panel = findPanel(path);
  if (!panel) return false;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  if (kernel && kernel.status === 'dead') return true;  // wait_idle reports it
  if (!kernel || kernel.status !== 'idle') return false;  // starting, restarting, busy
  let errors = 0, pending = 0;
  for (const cell of panel.content.widgets) {
    const m = cell.model;
    if (m.type !== 'code') continue;
    const prompt = cell.node.querySelector('.jp-InputPrompt');
    if (m.executionState === 'running' || (prompt && prompt.textContent.includes('[*]'))) return false;
    for (let i = 0; i < m.outputs.length; i++) if (m.outputs.get(i).type === 'error') errors++;
    if (m.executionCount === null && m.sharedModel.getSource().trim() !== '') pending++;
  }
  // done: every non-empty code cell ran, or one failed (Run All stops there); with state
  // 'settled' (a widget interaction, not a run), idle with nothing running is enough
  return state === 'settled' || pending === 0 || errors > 0;
}"""
)


class Lab:
    """JupyterLab in a Playwright page (see `open_lab`), driven the way a researcher would."""

    def __init__(self, page: Any, server: LabServer, artifacts: Path = ARTIFACTS) -> None:
        self.page = page
        self.server = server
        self.artifacts = artifacts
        self.path: str | None = None
        self.console: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.console.append(m.text))
        page.on("pageerror", lambda e: self.console.append(f"page error: {e}"))

    # -- the app ---------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        """Load JupyterLab and wait until it has started and restored its (empty) workspace."""
        self.page.goto(f"{self.server.url}lab?token={self.server.token}", timeout=timeout * 1000)
        self.page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout * 1000)
        self.page.evaluate(
            "async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }"
        )

    def command(self, command: str, args: dict[str, Any] | None = None) -> Any:
        """Run a JupyterLab command (e.g. "notebook:run-all-cells") and return its JSON-able result."""
        return self.page.evaluate(
            "async ([c, a]) => { const r = await window.jupyterapp.commands.execute(c, a); "
            "return r === undefined || r === null || typeof r !== 'object' ? r : null; }",
            [command, args or {}],
        )

    def open(self, path: str, timeout: float = 60) -> None:
        """Open the notebook at `path` (relative to the server's root), make it the current tab and
        wait for its kernel to be idle. Its panel is tagged (data-lab-path) so selectors stay inside it."""
        self.path = path
        self.command("docmanager:open", {"path": path, "factory": "Notebook"})
        self.page.wait_for_function(
            "(path) => {" + _FIND_PANEL + " return findPanel(path) !== null; }",
            arg=path,
            timeout=timeout * 1000,
        )
        self.page.evaluate(
            "async (path) => {"
            + _FIND_PANEL
            + """ const panel = findPanel(path);
            await panel.context.ready; await panel.sessionContext.ready;
            panel.node.setAttribute('data-lab-path', path);
            window.labIdle = window.labIdle || {};
            if (!(path in window.labIdle)) {
              window.labIdle[path] = 0;  // kernel busy -> idle transitions: a widget's callback ran
              panel.sessionContext.statusChanged.connect((_, s) => {
                if (s === 'idle') window.labIdle[path]++;
              });
            }
            window.jupyterapp.shell.activateById(panel.id); }""",
            path,
        )
        self._wait(lambda: self.state()["kernel"] == "idle", timeout, f"the kernel of {path} to start")

    def _panel_selector(self) -> str:
        """CSS for the opened notebook's panel."""
        return f'[data-lab-path="{self._require_path()}"]'

    def state(self) -> dict[str, Any]:
        """The opened notebook as the browser holds it: kernel status and, per cell, type, execution
        count, whether it runs and its error outputs."""
        return self.page.evaluate(_STATE_JS, self._require_path())

    def _require_path(self) -> str:
        if self.path is None:
            raise RuntimeError("open a notebook first: lab.open(path)")
        return self.path

    # -- running ---------------------------------------------------------------------------------

    def run_all(self, timeout: float = 120) -> None:
        """Restart the kernel and run all cells (the Kernel menu's "Restart Kernel and Run All
        Cells"), then wait until the run is over. Outputs and execution counts are cleared first,
        so what is read afterwards is this run's, and "done" cannot be taken from the saved copy."""
        path = self._require_path()
        self.page.evaluate(
            "(path) => {" + _FIND_PANEL + " window.jupyterapp.shell.activateById(findPanel(path).id); }", path
        )
        self.command("notebook:clear-all-cell-outputs")
        self.page.evaluate(
            "(path) => {"
            + _FIND_PANEL
            + """ for (const c of findPanel(path).content.widgets)
                 if (c.model.type === 'code') c.model.executionCount = null; }""",
            path,
        )
        # not awaited: the command resolves after the restart, the run goes on; wait_idle watches it
        self.page.evaluate("() => { void window.jupyterapp.commands.execute('notebook:restart-run-all'); }")
        self._accept_dialog()
        self.wait_idle(timeout)

    def _accept_dialog(self, timeout: float = 2) -> None:
        """Accept a confirmation dialog if one shows (the restart dialog, should its setting be ignored)."""
        dialog = self.page.locator(".jp-Dialog .jp-mod-accept")
        with contextlib.suppress(Exception):
            dialog.wait_for(state="visible", timeout=timeout * 1000)
            dialog.click()

    def wait_idle(self, timeout: float = 120, settled: bool = False) -> None:
        """Wait until the kernel is idle and no cell is running (no `[*]` prompt) and, unless
        `settled`, every code cell has run or one failed. `settled=True` is for after a widget
        interaction, where only the callbacks it triggered run."""
        path = self._require_path()
        try:
            self.page.wait_for_function(
                _DONE_JS, arg=[path, "settled" if settled else "run"], timeout=timeout * 1000, polling=200
            )
        except Exception as e:
            shot = self.screenshot("timeout")
            raise AssertionError(
                f"{path}: not idle after {timeout:.0f} s ({type(e).__name__}); cells still running or "
                f"not run: {self._unfinished()}; errors so far: {self.errors()}; browser console errors: "
                f"{self.console[-5:]}; server log tail:\n{self.server.log_tail(1500)}\nscreenshot: {shot}"
            ) from None
        if self.state()["kernel"] == "dead":
            raise AssertionError(f"{path}: the kernel died; screenshot: {self.screenshot('dead-kernel')}")

    def _idle_count(self) -> int:
        return self.page.evaluate("(path) => window.labIdle[path]", self._require_path())

    def _settle(self, mark: int, timeout: float = 60, busy_within: float = 5) -> None:
        """After a widget interaction: wait for the kernel to answer it (an idle status after `mark`,
        given up after `busy_within` s, for an interaction that sent nothing, e.g. the same value
        chosen again), then until it is idle with no cell running."""
        with contextlib.suppress(Exception):
            self.page.wait_for_function(
                "([path, mark]) => window.labIdle[path] > mark",
                arg=[self._require_path(), mark],
                timeout=busy_within * 1000,
                polling=50,
            )
        self.wait_idle(timeout, settled=True)

    def _unfinished(self) -> list[int]:
        cells = self.state().get("cells", [])
        return [
            c["index"]
            for c in cells
            if c["type"] == "code" and not c["empty"] and (c["running"] or c["count"] is None)
        ]

    def _wait(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            self.page.wait_for_timeout(100)

    def close(self, path: str | None = None) -> None:
        """Shut down the kernel of notebook `path` (default: the opened one) and close its tab
        without saving (the file on disk stays as the run left it), so that it does not idle on
        beside the next notebook."""
        path = path or self._require_path()
        self.page.evaluate(
            "async (path) => {"
            + _FIND_PANEL
            + """ const panel = findPanel(path);
            if (!panel) return;
            await panel.sessionContext.shutdown();
            panel.context.model.dirty = false;
            panel.dispose(); }""",
            path,
        )
        if path == self.path:
            self.path = None

    # -- reading ---------------------------------------------------------------------------------

    def errors(self) -> list[str]:
        """The notebook's error outputs (tracebacks, ANSI colours removed), one string each, and
        widgets that failed to render. stderr streams (warnings, progress bars) are not errors."""
        found = []
        for cell in self.state().get("cells", []):
            for e in cell.get("errors", []):
                tb = ANSI.sub("", e["traceback"]).strip()
                found.append(f"cell {cell['index']}: {e['ename']}: {e['evalue']}" + (f"\n{tb}" if tb else ""))
        broken = self.page.locator(
            f"{self._panel_selector()} .jupyter-widgets", has_text="Error displaying widget"
        )
        found += [f"widget: {t}" for t in broken.all_inner_texts()]
        return found

    def text(self, selector: str) -> str:
        """The visible text of the first element matching `selector` inside the opened notebook."""
        return self.page.locator(f"{self._panel_selector()} {selector}").first.inner_text()

    def count(self, selector: str) -> int:
        """How many elements match `selector` inside the opened notebook."""
        return self.page.locator(f"{self._panel_selector()} {selector}").count()

    def wait_for(self, selector: str, timeout: float = 30, has_text: str | None = None) -> Any:
        """The first element matching `selector` (and containing `has_text`) in the opened notebook,
        once it is visible; a Playwright Locator."""
        found = self.page.locator(f"{self._panel_selector()} {selector}", has_text=has_text).first
        found.wait_for(state="visible", timeout=timeout * 1000)
        return found

    def screenshot(self, name: str, target: str | Any = None) -> Path:
        """A PNG of the page, or of one element scrolled into view (`target`: a CSS selector inside
        the opened notebook, or a Locator), in the artifacts folder (outputs/test-artifacts/lab/
        unless $KIT_TEST_ARTIFACTS), named after the notebook; its path."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        shot = self.artifacts / f"{Path(self.path or 'lab').stem}-{name}.png"
        if target is None:
            self.page.screenshot(path=str(shot))
        else:
            element = (
                self.page.locator(f"{self._panel_selector()} {target}") if isinstance(target, str) else target
            )
            element.first.scroll_into_view_if_needed()
            element.first.screenshot(path=str(shot))
        return shot

    # -- widgets ---------------------------------------------------------------------------------

    def widget(self, target: str | Any) -> Any:
        """The DOM node (a Playwright Locator) of the widget given the CSS class `target` with
        ipywidgets' `add_class`, in the opened notebook; a Locator `target` is returned as is (for
        widgets that have no class of their own: see `cell`)."""
        if not isinstance(target, str):
            return target
        return self.page.locator(f"{self._panel_selector()} .{target}").first

    def cell(self, source_contains: str) -> Any:
        """The last cell whose source contains `source_contains` (a Locator of its `.jp-Cell` node,
        outputs included): e.g. `lab.cell("sample_browser(").locator(".widget-vbox")`."""
        index = self.page.evaluate(
            "([path, text]) => {"
            + _FIND_PANEL
            + """ const cells = findPanel(path).content.widgets;
            for (let i = cells.length - 1; i >= 0; i--) {
              if (cells[i].model.sharedModel.getSource().includes(text)) {
                cells[i].node.setAttribute('data-lab-cell', String(i)); return i;
              }
            }
            return -1; }""",
            [self._require_path(), source_contains],
        )
        if index < 0:
            raise AssertionError(f"{self.path}: no cell's source contains {source_contains!r}")
        return self.page.locator(f'{self._panel_selector()} [data-lab-cell="{index}"]')

    def set_slider(self, target: str | Any, value: float | int) -> None:
        """Set a slider widget to `value` as a user types it: into the slider's readout (ipywidgets 8
        renders an editable `.widget-readout`), then Enter. Waits for the kernel's callbacks."""
        readout = self.widget(target).locator(".widget-readout")
        mark = self._idle_count()
        readout.click()
        self.page.keyboard.press("ControlOrMeta+a")
        self.page.keyboard.type(str(value))
        self.page.keyboard.press("Enter")
        self._settle(mark)

    def step_slider(self, target: str | Any, key: str = "ArrowRight", times: int = 1) -> None:
        """Move a slider widget by keyboard: focus its handle (noUiSlider's `.noUi-handle`, or the
        jQuery UI `.ui-slider-handle` of older widgets) and press `key` ("ArrowRight", "ArrowLeft",
        "PageUp", "Home", "End"...) `times` times. Waits for the kernel's callbacks."""
        handle = self.widget(target).locator(".noUi-handle, .ui-slider-handle").first
        mark = self._idle_count()
        handle.focus()
        for _ in range(times):
            handle.press(key)
        self._settle(mark)

    def slider_value(self, target: str | Any) -> str:
        """The slider's readout as shown."""
        return self.widget(target).locator(".widget-readout").inner_text().strip()

    def select_dropdown(self, target: str | Any, option: str, description: str | None = None) -> None:
        """Choose `option` (its label) in a Dropdown: the widget `target` (see `widget`), or, when the class
        is on a container, its Dropdown labelled `description`. Waits for the kernel's callbacks."""
        root = self.widget(target)
        if description is not None:
            root = root.locator(
                ".widget-dropdown", has=self.page.locator("label", has_text=description)
            ).first
        mark = self._idle_count()
        root.locator("select").first.select_option(label=option)
        self._settle(mark)

    def dropdown_options(self, target: str | Any, description: str | None = None) -> list[str]:
        """The labels a Dropdown offers (see `select_dropdown` for the arguments)."""
        root = self.widget(target)
        if description is not None:
            root = root.locator(
                ".widget-dropdown", has=self.page.locator("label", has_text=description)
            ).first
        return root.locator("select option").all_inner_texts()


@contextlib.contextmanager
def open_lab(
    server: LabServer, width: int = 1400, height: int = 1000, artifacts: Path = ARTIFACTS
) -> Iterator[Lab]:
    """Headless Debian Chromium (via Playwright, no browser download) on the server's JupyterLab,
    started and restored; closed when the block ends."""
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install -y chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            lab = Lab(page, server, artifacts)
            lab.start()
            yield lab
        finally:
            browser.close()
