"""Opening a finished run instead of re-running it: `rerun=False` on the stage functions, the
executed notebooks turned to open their artifacts, `kit lab`'s notebooks folder."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import yaml
from conftest import REPO
from fixtures_outputs import write_run

from kit import stages
from kit.notebooks import MOVED_MODULES, REOPEN, STAGES, moved_imports, open_on_rerun, prepare_lab
from kit.params import load_params
from kit.runfolder import RunFolder, write_json_atomic


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def finished(tmp_path: Path):
    """Params whose engine cannot be reached (any stage that ran would fail) and a run folder that
    holds every stage's artifact."""
    path = tmp_path / "fx.yaml"
    port = _closed_port()
    path.write_text(
        yaml.safe_dump(
            {
                "run": "fx",
                "output_dir": "out",
                "model": {"path": "no-model"},
                "engine": {"flavor": "external", "base_url": f"http://127.0.0.1:{port}"},
            }
        )
    )
    params = load_params(path)
    folder = write_run(Path(params.run_dir))
    write_json_atomic(folder.probe, {"summary": {"go": True}, "marker": "probe"})
    write_json_atomic(folder.decision, {"chosen_arm": "plain", "marker": "decision"})
    write_json_atomic(folder.manifest, {"complete": True, "marker": "manifest"})
    write_json_atomic(folder.plan, {"prompts": 3, "marker": "plan"})
    write_json_atomic(folder.summary, {"run": "fx", "rows": 21, "marker": "summary"})
    return params, folder


def test_rerun_false_opens_every_artifact(finished) -> None:
    params, folder = finished
    assert stages.probe(params, rerun=False)["marker"] == "probe"
    assert stages.decide(params, rerun=False)["marker"] == "decision"
    assert stages.generate(params, rerun=False)["marker"] == "manifest"
    assert stages.plan(params)["marker"] == "plan"
    assert stages.sweep(params).empty  # no sweep.parquet in this folder: an empty frame, no error
    line = stages.made(folder, "decide")
    assert line.startswith("**opened** `decision.json` of run `fx`, made ") and "rerun = True" in line
    analysis = stages.analyse(params, rerun=False)
    assert analysis.summary["marker"] == "summary" and not analysis.read
    assert "not read yet" in repr(analysis)
    assert len(analysis.data.df) > 0 and analysis.read  # the shards are read on first use
    assert json.loads(folder.summary.read_text())["marker"] == "summary"  # summary.json untouched


def test_rerun_false_runs_a_stage_without_its_artifact(finished) -> None:
    """No summary.json yet: rerun=False runs stage 4 (as a notebook opened on a new run must)."""
    params, folder = finished
    folder.summary.unlink()
    analysis = stages.analyse(params, rerun=False)
    assert analysis.read and analysis.summary["rows"] == len(analysis.data.df)
    assert stages.made(folder, "analyse").startswith("**ran the stage:** `summary.json`")


def test_rerun_true_runs_the_stage(finished) -> None:
    """rerun=True (the CLI's and `kit run`'s) runs the stage: here its engine is unreachable, so it fails."""
    params, folder = finished
    analysis = stages.analyse(params, rerun=True)
    assert "marker" not in analysis.summary  # written again from the shards
    with pytest.raises(Exception):  # noqa: B017  (stage 2 cannot reach its engine; which error is its own)
        stages.decide(params, rerun=True)


def _executed(path: Path, rerun_line: str = "rerun = True") -> None:
    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_code_cell("params_path = 'x'\nrerun = False", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            f"# Parameters\nparams_path = '/p.yaml'\nrun_name = 'fx'\n{rerun_line}\n",
            metadata={"tags": ["injected-parameters"]},
        ),
        nbformat.v4.new_code_cell("rerun_seen = rerun"),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(book, path)


def test_open_on_rerun_turns_the_injected_line(tmp_path: Path) -> None:
    path = tmp_path / "02.ipynb"
    _executed(path)
    open_on_rerun(path)
    cells = nbformat.read(path, as_version=4).cells
    assert REOPEN in cells[1].source.splitlines()
    assert cells[0].source.endswith("rerun = False") and cells[2].source == "rerun_seen = rerun"
    assert "rerun = True" not in cells[1].source.splitlines()


def test_an_older_runs_notebook_imports_stage_2_where_it_is_now(tmp_path: Path) -> None:
    """An executed notebook 02 of a kit before kit/decide/'s subpackages imports kit.decide.view and
    its neighbours: `kit lab` writes the modules' names as they are now, and each of them exists."""
    path = tmp_path / "02.ipynb"
    _executed(path)
    book = nbformat.read(path, as_version=4)
    old = "from kit.decide.view import decision_verdict\nfrom kit.decide.jobhours import job_in_hours"
    book.cells.append(nbformat.v4.new_code_cell(old))
    nbformat.write(book, path)
    open_on_rerun(path)
    assert nbformat.read(path, as_version=4).cells[-1].source == (
        "from kit.decide.views.notebook import decision_verdict\n"
        "from kit.decide.forecast.jobhours import job_in_hours"
    )
    assert moved_imports("import kit.decide.sweep_level as sl") == "import kit.decide.measure.level as sl"
    assert moved_imports("from kit.decide.forecast.job import x") == "from kit.decide.forecast.job import x"
    assert all(importlib.util.find_spec(new) for new in MOVED_MODULES.values())


def test_prepare_lab_writes_the_missing_notebooks(finished) -> None:
    params, folder = finished
    (folder.root / "params.yaml").write_text(Path(params.source_file).read_text())
    _executed(folder.notebook(STAGES["decide"]))
    where = prepare_lab(folder)
    assert where == folder.notebooks
    assert sorted(p.stem for p in where.glob("*.ipynb")) == sorted(STAGES.values())
    assert REOPEN in nbformat.read(folder.notebook(STAGES["decide"]), as_version=4).cells[1].source
    book = nbformat.read(folder.notebook(STAGES["analyse"]), as_version=4)
    injected = [c for c in book.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "rerun = False" in injected[0].source
    assert str(folder.params.resolve()) in injected[0].source


def test_prepare_lab_needs_a_run_folder(tmp_path: Path) -> None:
    from kit.errors import KitError

    with pytest.raises(KitError, match="params.yaml"):
        prepare_lab(RunFolder(tmp_path / "nothing").ensure())


@pytest.mark.slow
def test_kit_lab_serves_the_run_notebooks(finished) -> None:
    """`kit lab RUN` starts a real JupyterLab whose contents are the run's notebooks."""
    import httpx

    params, folder = finished
    (folder.root / "params.yaml").write_text(Path(params.source_file).read_text())
    port, token = _closed_port(), "kit-lab-test"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(folder.root / ".jcfg"),
        "JUPYTER_RUNTIME_DIR": str(folder.root / ".jrt"),
    }
    cmd = [sys.executable, "-m", "kit.cli", "lab", str(folder.root), "--no-browser", f"--port={port}"]
    server = subprocess.Popen(
        [*cmd, f"--IdentityProvider.token={token}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        names: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not names:
            assert server.poll() is None, server.stdout.read().decode()[-2000:]  # type: ignore[union-attr]
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/contents", params={"token": token}, timeout=5)
                names = [c["name"] for c in r.json()["content"]] if r.status_code == 200 else []
            except httpx.HTTPError:
                time.sleep(0.5)
        assert sorted(names) == sorted(f"{n}.ipynb" for n in STAGES.values())
    finally:
        server.terminate()
        server.wait(timeout=30)
