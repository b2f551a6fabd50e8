"""`kit report`: executed notebooks to offline HTML, checked in headless Chromium with the network off."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_analyse_fixture import build_run  # noqa: E402

from kit.errors import KitError  # noqa: E402
from kit.report import network_references, render_report  # noqa: E402

CELLS = [
    ("code", "run_dir = ''", ["parameters"]),
    ("markdown", "# Analysis of a fixture run\n\nInline math $E = (1 - a^{k+1}) / (1 - a)$.", []),
    (
        "code",
        "from pathlib import Path\nfrom IPython.display import Image, display\n"
        "from kit.analyse import analyse_run, read_run, sample_browser\nfrom kit.runfolder import RunFolder\n"
        "folder = RunFolder(Path(run_dir))\nsummary = analyse_run(folder)\n"
        "for p in summary['figures'][:3]:\n    display(Image(filename=p))",
        [],
    ),
    ("code", "data = read_run(folder)\nsample_browser(data.df, n=4, flags=data.flags)", []),
    ("code", "SECRET_CODE_MARKER = 1\nprint('rows', summary['rows'])", []),
]


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src, tags in CELLS:
        cell = nbformat.v4.new_code_cell(src) if kind == "code" else nbformat.v4.new_markdown_cell(src)
        cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


@pytest.fixture(scope="module")
def executed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixture run whose analysis notebook was executed by papermill, as the stages do."""
    papermill = pytest.importorskip("papermill")
    run = build_run(tmp_path_factory.mktemp("report") / "run")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    source = run.root / "04_analyse.ipynb"
    nbformat.write(_notebook(), source)
    papermill.execute_notebook(
        str(source),
        str(run.notebooks / "04_analyse.ipynb"),
        parameters={"run_dir": str(run.root)},
        kernel_name="python3",
        progress_bar=False,
    )
    return run.root


@pytest.mark.slow
def test_render_report_is_self_contained(executed_run: Path) -> None:
    index = render_report(executed_run, hide_code=True)
    page = (index.parent / "04_analyse.html").read_text()
    assert network_references(page) == []
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?://""", page, re.IGNORECASE)
    images = re.findall(r"<img[^>]+src=\"([^\"]+)\"", page)
    assert len(images) >= 3 and all(s.startswith("data:image/png;base64,") for s in images)
    assert "SECRET_CODE_MARKER" not in page  # code hidden
    assert "kit-samples" in page  # the sample browser's static table replaced the widget
    assert "application/vnd.jupyter.widget" not in page
    text = index.read_text()
    assert "04_analyse.html" in text and "rows generated" in text and ">20<" in text
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?://""", text, re.IGNORECASE)


@pytest.mark.slow
def test_render_report_can_show_code(executed_run: Path) -> None:
    index = render_report(executed_run, hide_code=False)
    assert "SECRET_CODE_MARKER" in (index.parent / "04_analyse.html").read_text()


def test_missing_notebooks_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KitError, match="no executed notebooks"):
        render_report(tmp_path)


def test_network_references_finds_fetching_tags() -> None:
    page = (
        '<script src="https://cdn.x/require.js"></script><link rel="stylesheet" href="//fonts.y/css">'
        '<img src="data:image/png;base64,AAA"><a href="https://example.org">a link is not fetched</a>'
        '<style>@import "https://z/a.css"; .a{background:url(http://w/b.png)}</style>'
    )
    assert network_references(page) == [
        "https://cdn.x/require.js",
        "//fonts.y/css",
        "https://z/a.css",
        "http://w/b.png",
    ]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)
CHECKER = """<!DOCTYPE html><html><body><iframe id="f" src="{url}" width="1200" height="900"></iframe>
<script>
document.getElementById('f').addEventListener('load', () => setTimeout(() => {{
  let out;
  try {{
    const imgs = Array.from(document.getElementById('f').contentDocument.images);
    const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
    out = 'IMAGES ' + imgs.length + ' LOADED ' + ok;
  }} catch (e) {{ out = 'ERROR ' + e; }}
  const p = document.createElement('pre'); p.id = 'result'; p.textContent = out; document.body.appendChild(p);
}}, 300));
</script></body></html>
"""


def _chromium(tmp: Path, *args: str) -> str:
    """Run headless Chromium with every network name unresolvable; return its stdout."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'chromium-profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--allow-file-access-from-files",
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _images_loaded(tmp: Path, page: Path) -> tuple[int, int]:
    """(images on the page, images that decoded) as seen by Chromium after the page loaded."""
    checker = tmp / f"check-{page.stem}.html"
    checker.write_text(CHECKER.format(url=page.resolve().as_uri()))
    dom = _chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", checker.as_uri())
    found = re.search(r"IMAGES (\d+) LOADED (\d+)", dom)
    assert found, f"checker did not report: {dom[-500:]}"
    return int(found.group(1)), int(found.group(2))


@needs_chromium
def test_checker_sees_blocked_network(tmp_path: Path) -> None:
    """The browser check can fail: a remote image does not load with the network blocked."""
    page = tmp_path / "control.html"
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    page.write_text(f'<img src="data:image/png;base64,{pixel}"><img src="https://example.com/x.png">')
    assert _images_loaded(tmp_path, page) == (2, 1)


@pytest.mark.slow
@needs_chromium
def test_report_opens_offline_in_chromium(executed_run: Path, tmp_path: Path) -> None:
    index = render_report(executed_run, hide_code=True)
    dom = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", index.as_uri())
    links = re.findall(r'<a href="([^"]+\.html)"', dom)
    assert links == ["04_analyse.html"] and "rows generated" in dom
    for name in links:
        total, loaded = _images_loaded(tmp_path, index.parent / name)
        assert total >= 3 and loaded == total
    for page in (index, index.parent / links[0]):
        shot = tmp_path / f"{page.stem}.png"
        _chromium(
            tmp_path, "--window-size=1200,1600", "--hide-scrollbars", f"--screenshot={shot}", page.as_uri()
        )
        assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 5000
        print(f"screenshot: {shot}")


def test_headline_numbers_from_every_json(tmp_path: Path) -> None:
    from kit.analyse import analyse_run
    from kit.report import headline_numbers
    from kit.runfolder import write_json_atomic

    run = build_run(tmp_path / "run")
    analyse_run(run)
    devices = [{"name": "NVIDIA H200", "index": i} for i in range(2)]
    write_json_atomic(run.probe, {"gpus": {"devices": devices}})
    write_json_atomic(
        run.decision, {"chosen_arm": "spec_k3", "decided_by": "measured", "objective": "throughput"}
    )
    numbers = headline_numbers(run.root)
    assert numbers["GPU"] == "2 x NVIDIA H200" and numbers["chosen arm"] == "spec_k3 (measured)"
    assert numbers["rows generated"] == 20 and numbers["failures"] == 3 and numbers["complete"] is True
    run.decision.write_text("{broken")
    assert headline_numbers(run.root)["chosen arm"] is None


NOTEBOOK_04 = Path(__file__).resolve().parents[1] / "notebooks" / "04_analyse_outputs.ipynb"


@pytest.mark.slow
@pytest.mark.skipif(not NOTEBOOK_04.exists(), reason="notebooks/04_analyse_outputs.ipynb not written yet")
def test_notebook_04_through_papermill(tmp_path: Path) -> None:
    """The stage 4 notebook, run headless on a fixture run, writes summary.json and renders offline."""
    papermill = pytest.importorskip("papermill")
    run = build_run(tmp_path / "out" / "fx")
    run.notebooks.mkdir(parents=True, exist_ok=True)
    params = tmp_path / "fx.yaml"
    params.write_text(
        "run: fx\noutput_dir: out\nmodel: {path: no-model}\n"
        "engine: {flavor: external, base_url: 'http://127.0.0.1:9'}\n"
    )
    executed = run.notebooks / NOTEBOOK_04.name
    papermill.execute_notebook(
        str(NOTEBOOK_04),
        str(executed),
        parameters={"params_path": str(params)},
        cwd=str(NOTEBOOK_04.parent),
        kernel_name="python3",
        progress_bar=False,
    )
    summary = json.loads(run.summary.read_text())
    assert summary["rows"] == 20 and summary["flags"]["tool_call_broken"] == 2
    page = (render_report(run.root).parent / f"{NOTEBOOK_04.stem}.html").read_text()
    images = re.findall(r"<img[^>]+src=\"([^\"]+)\"", page)
    assert len(images) == len(summary["figures"]) and all(s.startswith("data:image/png") for s in images)
    assert network_references(page) == []
