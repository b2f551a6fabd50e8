"""The stage notebooks in a real JupyterLab, in headless Chromium, as a researcher meets them: the
executed notebooks of the session's demo run (`demo_run`) are opened, restarted and run again;
no cell may fail, the widgets must render and answer, and the processes the kernels start are
recorded (re-running an executed notebook should open the run's artifacts, not start an engine).

The run is copied first (paths rewritten), so what the notebooks write stays out of the run the
pipeline tests read. Screenshots land in outputs/test-artifacts/lab/. The harness is tests/lab.py.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from lab import Lab, LabServer, ProcInfo, jupyter_lab, open_lab
from test_report import require_chromium

pytestmark = pytest.mark.slow
ANALYSE = "04_analyse_outputs.ipynb"
DECIDE = "02_decide_mtp.ipynb"


def _images(root) -> list[str]:  # noqa: ANN001
    """The `src` of every image inside a widget's DOM node: a re-drawn figure is a new PNG."""
    return [img.get_attribute("src") or "" for img in root.locator("img").all()]


def require_playwright() -> None:
    """Skip without Playwright for Python, or fail when KIT_REQUIRE_ENGINES=1 (the dev extra has it)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        message = "playwright is not installed (pip install -e '.[dev]')"
        if os.environ.get("KIT_REQUIRE_ENGINES") == "1":
            pytest.fail(message)
        pytest.skip(message)


def copy_run(run: Path, into: Path) -> Path:
    """A copy under `into` of the pipeline folder holding `run` (its params file and outputs), the
    absolute paths to them in params, JSON and notebooks pointed at the copy; the copied run folder.
    What notebooks run here write lands in the copy. The input data is read in place: a changed path
    there would change the data section of the params, which the run's prompt plan is keyed on."""
    src = run.parent.parent
    dst = into / src.name
    dst.mkdir()
    moved = {}
    for entry in src.iterdir():
        if entry.name == "data":
            continue
        copy = shutil.copytree if entry.is_dir() else shutil.copy2
        copy(entry, dst / entry.name)
        moved[str(entry)] = str(dst / entry.name)
    for f in dst.rglob("*"):
        if f.is_file() and f.suffix in {".yaml", ".yml", ".json", ".ipynb"}:
            text = was = f.read_text()
            for old, new in moved.items():
                text = text.replace(old, new)
            if text != was:
                stat = f.stat()
                f.write_text(text)
                os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # artifacts keep their age
    return dst / run.relative_to(src)


@pytest.fixture(scope="module")
def lab_home(tmp_path_factory) -> Path:
    """The folder JupyterLab serves: the run's copy and the harness's own notebook go under it."""
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="module")
def server(lab_home: Path) -> Iterator[LabServer]:
    """One JupyterLab for the module (stopped, kernels and what they started included, at its end)."""
    require_chromium()
    require_playwright()
    with jupyter_lab(lab_home) as running:
        yield running


@pytest.fixture(scope="module")
def lab(server: LabServer) -> Iterator[Lab]:
    """One Chromium page on it, JupyterLab loaded."""
    with open_lab(server) as page:
        yield page


@pytest.fixture(scope="module")
def lab_run(demo_run: Path, lab_home: Path) -> str:
    """The demo run's copy, as a path relative to the served folder."""
    return copy_run(demo_run, lab_home).relative_to(lab_home).as_posix()


@dataclass
class NotebookRun:
    """What one restart-and-run-all left: error outputs, processes started, time taken, screenshot."""

    path: str
    errors: list[str]
    started: list[ProcInfo]
    seconds: float
    screenshot: Path

    def explain(self) -> str:
        """The failure message: the notebook, its error outputs, what it started, the screenshot."""
        errors = "\n\n".join(self.errors) or "(no error outputs)"
        started = "\n".join(f"  {p.pid} {p.cmdline[:200]}" for p in self.started) or "  (none)"
        return f"{self.path}:\n{errors}\nprocesses started:\n{started}\nscreenshot: {self.screenshot}"


def run_notebook(lab: Lab, server: LabServer, path: str, timeout: float = 150) -> NotebookRun:
    """Open `path`, restart and run all (recording the processes started meanwhile), screenshot."""
    lab.open(path)
    began = time.monotonic()
    with server.watch_processes() as watch:
        lab.run_all(timeout=timeout)
    seconds = time.monotonic() - began
    return NotebookRun(path, lab.errors(), watch.started, seconds, lab.screenshot("run-all"))


@pytest.fixture(scope="module")
def analysed(lab: Lab, server: LabServer, lab_run: str) -> NotebookRun:
    """Notebook 04 of the demo run, run again in JupyterLab (left open: the widget tests use it)."""
    return run_notebook(lab, server, f"{lab_run}/notebooks/{ANALYSE}")


@pytest.fixture(scope="module")
def decided(lab: Lab, server: LabServer, lab_run: str, analysed: NotebookRun) -> NotebookRun:
    """Notebook 02 of the demo run, run again in JupyterLab (after 04, whose kernel is shut down first)."""
    lab.close(analysed.path)
    return run_notebook(lab, server, f"{lab_run}/notebooks/{DECIDE}")


def test_analyse_notebook_runs_again(analysed: NotebookRun) -> None:
    """Notebook 04, restarted and run again in JupyterLab: no cell fails, no engine starts."""
    assert analysed.errors == [], analysed.explain()
    engines = [p for p in analysed.started if p.is_engine_server]
    assert engines == [], f"stage 4 started an engine server\n{analysed.explain()}"


def test_sample_browser_renders_and_filters(lab: Lab, analysed: NotebookRun) -> None:
    """The sample browser is the live widget (not the static table of reports): its filters are
    there, it shows a row, and choosing a source in its dropdown re-draws it through the kernel."""
    from playwright.sync_api import expect

    lab.open(analysed.path)
    cell = lab.cell("sample_browser(")
    # a widget view's output node carries no data-mime-type (its renderer is a Lumino panel)
    browser = cell.locator(".jp-OutputArea-output .widget-vbox").first
    try:
        browser.wait_for(state="visible", timeout=30_000)
    except Exception:
        pytest.fail(f"no sample browser widget in the output of its cell\n{analysed.explain()}")
    labels = browser.locator(".widget-dropdown label").all_inner_texts()
    assert labels[:3] == ["source", "finish", "flag"], labels
    shown = browser.locator(".widget-html").first
    expect(shown).to_contain_text("rows match")
    sources = lab.dropdown_options(browser, "source")
    assert sources[0] == "(all)" and len(sources) == 7, sources  # (all) and the demo's six sources
    lab.select_dropdown(browser, sources[-1], description="source")
    expect(shown).to_contain_text(f"· {sources[-1]} ·")
    assert cell.locator("table.kit-samples").count() == 0  # the static fallback is not shown
    lab.screenshot("sample-browser", browser)


def test_explore_filter_redraws_figures_and_samples(lab: Lab, analysed: NotebookRun) -> None:
    """Notebook 04's filters, live: picking a source narrows the caption's count and re-draws the
    figures (their images change) for that source only."""
    from playwright.sync_api import expect

    lab.open(analysed.path)
    box = lab.widget("kit-explore")
    box.wait_for(state="visible", timeout=30_000)
    caption = box.locator(".kit-explore-caption")
    before, images = caption.inner_text(), _images(box)
    assert "source=all" in before and len(images) == 2, (before, len(images))
    options = lab.dropdown_options("kit-explore-source")
    names = [re.sub(r"\s\([\d,]+\)$", "", o) for o in options]  # "metamathqa (3)": the count in the run
    assert names[0] == "all" and len(names) == 7, options
    lab.select_dropdown("kit-explore-source", options[-1])
    source = names[-1]
    expect(caption).to_contain_text(f"source={source}")
    shown, total = caption.inner_text().split(" rows", 1)[0].split(" of ")
    assert int(shown.replace(",", "")) < int(total.replace(",", "")), caption.inner_text()
    assert _images(box) != images
    lab.screenshot("explore", box)


def test_decide_notebook_runs_again(decided: NotebookRun) -> None:
    """Notebook 02, restarted and run again in JupyterLab: no cell fails."""
    assert decided.errors == [], decided.explain()


def test_decide_notebook_starts_no_engine(decided: NotebookRun) -> None:
    """Re-running the executed 02 opens the run's decision.json (`kit run` left it `rerun = False`)
    instead of measuring: no engine server starts, and the notebook says what it opened."""
    engines = [p for p in decided.started if p.is_engine_server]
    assert engines == [], f"re-running the executed 02 started an engine server\n{decided.explain()}"


def test_whatif_slider_and_gpu_redraw_the_prediction(lab: Lab, decided: NotebookRun) -> None:
    """Notebook 02's what-if, live: moving the accept-length slider and picking a B200 change the
    caption's figures and the plot's image; the measured points are the run's whatever the controls."""
    from playwright.sync_api import expect

    lab.open(decided.path)
    assert lab.count(".kit-whatif-static") == 0, "the what-if shows its static page, not the widget"
    box = lab.widget("kit-whatif")
    box.wait_for(state="visible", timeout=30_000)
    caption = box.locator(".kit-whatif-caption")
    before, images = caption.inner_text(), _images(box)
    assert images and "accept length" in before, before
    lab.set_slider("kit-whatif-accept", 2.5)
    expect(caption).to_contain_text("accept length 2.50")
    after = caption.inner_text()
    assert after != before and _images(box) != images, (before, after)
    lab.select_dropdown("kit-whatif-gpu", "B200")
    expect(caption).to_contain_text("B200")
    assert caption.inner_text().endswith(before.rsplit(";", 1)[-1])  # "measured points: N" unchanged
    lab.screenshot("whatif", box)


def test_harness_sees_errors_and_drives_widgets(lab: Lab, lab_home: Path) -> None:
    """The harness itself: a traceback is an error and stderr is not (so "no errors" above means
    something), Run All stops at the failing cell, and the slider / dropdown helpers reach the
    kernel. Needs no demo run; last in the module so the demo run is not made with the browser up."""
    from playwright.sync_api import expect

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import ipywidgets as w\n"
            "k = w.IntSlider(value=3, min=0, max=10, description='k')\n"
            "arm = w.Dropdown(options=['plain', 'ngram', 'mtp'], description='arm')\n"
            "echo = w.HTML()\n"
            "k.add_class('lab-k'); arm.add_class('lab-arm'); echo.add_class('lab-echo')\n"
            "def show(_=None):\n"
            "    echo.value = f'k={k.value} arm={arm.value}'\n"
            "k.observe(show, 'value'); arm.observe(show, 'value'); show()\n"
            "w.VBox([k, arm, echo])"
        ),
        nbformat.v4.new_code_cell(
            "import sys, warnings\nprint('a note', file=sys.stderr)\nwarnings.warn('careful')"
        ),
        nbformat.v4.new_code_cell(""),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
        nbformat.v4.new_code_cell("print('never reached')"),
    ]
    (lab_home / "harness").mkdir(exist_ok=True)
    nbformat.write(nb, lab_home / "harness" / "widgets.ipynb")
    lab.open("harness/widgets.ipynb")
    lab.run_all(timeout=60)
    errors = lab.errors()
    assert len(errors) == 1 and errors[0].startswith("cell 3: ValueError: boom"), errors
    assert "Traceback" in errors[0] and "\x1b[" not in errors[0], errors[0]
    assert lab.state()["cells"][4]["count"] is None  # Run All stopped at the error
    echo = lab.widget("lab-echo")
    expect(echo).to_have_text("k=3 arm=plain")
    lab.set_slider("lab-k", 7)
    expect(echo).to_have_text("k=7 arm=plain")
    assert lab.slider_value("lab-k") == "7"
    lab.step_slider("lab-k", "ArrowRight", times=2)
    expect(echo).to_have_text("k=9 arm=plain")
    assert lab.dropdown_options("lab-arm") == ["plain", "ngram", "mtp"]
    lab.select_dropdown("lab-arm", "mtp")
    expect(echo).to_have_text("k=9 arm=mtp")
    assert lab.screenshot("widgets").stat().st_size > 10_000
    lab.close()
