"""`kit run`'s notebooks: a stop signal reaches the kernel as an interrupt (so the stage in it saves
its work), and a kernel that dies is one message. Real Jupyter kernels through papermill."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow

RUN_STAGE = """
import sys
from pathlib import Path
import kit.notebooks as nb
from kit.params import load_params
from kit.runfolder import RunFolder
nb.notebooks_dir = lambda: Path(sys.argv[2])
params = load_params(Path(sys.argv[1]))
try:
    nb.execute_stage(params, "generate", RunFolder(params.run_dir))
except KeyboardInterrupt as e:
    print("interrupted", getattr(e, "signum", signal.SIGINT), flush=True)
    sys.exit(3)
except Exception as e:
    print(f"{type(e).__name__}: {e}", flush=True)
    sys.exit(4)
"""


def stage_notebook(folder: Path, code: str) -> Path:
    """A stand-in for notebook 03 (a parameters cell, then `code`)."""
    folder.mkdir(exist_ok=True)
    params = nbformat.v4.new_code_cell('params_path = ""\nrun_name = ""')
    params.metadata["tags"] = ["parameters"]
    book = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(code)])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(book, folder / "03_generate.ipynb")
    return folder


def run_stage(params_file: Path, notebooks: Path, stderr: int | None = None) -> subprocess.Popen:
    code = "import signal\n" + RUN_STAGE
    return subprocess.Popen(
        [sys.executable, "-c", code, str(params_file), str(notebooks)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def test_a_stage_kernel_prints_no_transport_warning(write_params, tmp_path):
    """ipykernel 7 warns on every kernel reached over TCP without encryption (four lines a `kit run`,
    nothing the user can act on): the stage kernels are reached over IPC instead."""
    from kit.notebooks import kernel_config

    assert kernel_config().KernelManager.transport == "ipc"
    proc = run_stage(write_params("quiet"), stage_notebook(tmp_path / "nbs", "print('ran')"), subprocess.PIPE)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, (out, err)
    assert "ran" in out and "without encryption" not in err and "WARNING" not in err, err


def test_sigterm_interrupts_the_kernel_so_the_stage_saves_its_work(write_params, tmp_path):
    saved = tmp_path / "saved"
    started = tmp_path / "started"
    cell = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        "try:\n    time.sleep(120)\n"
        f"except KeyboardInterrupt:\n    pathlib.Path({str(saved)!r}).write_text('flushed')\n    raise\n"
    )
    proc = run_stage(write_params("nb"), stage_notebook(tmp_path / "nbs", cell))
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert started.exists(), "the cell never started"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert saved.read_text() == "flushed", "the kernel was not interrupted: its finished work is lost"
    assert proc.returncode == 3 and f"interrupted {int(signal.SIGTERM)}" in out


def test_a_dead_kernel_is_one_message(write_params, tmp_path):
    cell = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    proc = run_stage(write_params("dead"), stage_notebook(tmp_path / "nbs", cell))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 4, out
    assert out.startswith("KitError: the kernel running notebook 03_generate died") and "rerun" in out
