"""The suite runs in its own HOME and temp folder, and its end fails the run when a process it started
is alive or it wrote outside those folders and the checkout (tests/isolation.py). The checks are run
here on inner pytest sessions that break each rule on purpose, with a fresh HOME of their own, and on
one that runs the suite's own tests of every tool it starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import isolation
import psutil
import pytest
from conftest import REPO

INNER_CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO / "tests")!r})
import isolation

def pytest_configure(config):
    config.pluginmanager.register(isolation.Guard(isolation.isolate()), "kit-isolation")
"""


def test_this_session_has_its_own_home_temp_and_caches(tmp_path: Path) -> None:
    root = Path(tempfile.gettempdir()).parent
    assert root.name == os.environ[isolation.TAG] and root.name.startswith("kit-t-")
    assert Path.home() == root / "home" != Path(os.environ[isolation.ORIGINAL_HOME])
    assert tmp_path.is_relative_to(root)  # pytest's own tmp_path too
    for name in ("HF_HOME", "XDG_CACHE_HOME", "KIT_CACHE_DIR", "MPLCONFIGDIR", "JUPYTER_DATA_DIR"):
        assert Path(os.environ[name]).is_relative_to(root), name
    code = (
        "import json, pathlib, tempfile; print(json.dumps([str(pathlib.Path.home()), tempfile.gettempdir()]))"
    )
    child = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout)
    assert child == [str(root / "home"), str(root / "tmp")]  # what every process the suite starts sees


def inner_session(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run `body` (test functions) as a pytest session of its own with a fresh, empty HOME."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(body)
    home = tmp_path / "original-home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp_path), "KIT_TEST_GRACE_S": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_inner.py")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return done, home


def test_a_process_left_alive_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    body = (
        "import subprocess, pathlib\n"
        "def test_leaves_one():\n"
        "    p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        f"    pathlib.Path({str(tmp_path / 'pid')!r}).write_text(str(p.pid))\n"
    )
    done, _ = inner_session(tmp_path, body)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "still alive at the session's end (killed now): pid" in done.stdout and "sleep 300" in done.stdout
    pid = int((tmp_path / "pid").read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_write_into_the_original_home_fails_the_run(tmp_path: Path) -> None:
    body = (
        "import os, pathlib\n"
        "def test_writes_a_token_where_it_should_not():\n"
        "    home = pathlib.Path(os.environ['KIT_TEST_ORIGINAL_HOME'])\n"
        "    (home / '.ray').mkdir()\n"
        "    (home / '.ray' / 'auth_token').write_text('x')\n"
    )
    done, home = inner_session(tmp_path, body)
    assert done.returncode == 1, done.stdout[-2000:]
    assert f"written outside the session's folders and the checkout: {home / '.ray'}" in done.stdout
    assert "the session's HOME and temp folder are kept for a look" in done.stdout


def test_a_tool_folder_in_the_system_temp_folder_fails_the_run_another_jobs_file_does_not(
    tmp_path: Path,
) -> None:
    """A `ray` folder in the temp folder the session started with is what Ray makes when a process of
    the suite lost its TMPDIR: the run fails. A file named like a tool's (another job's
    `/tmp/vllm_test.log` on a shared machine failed a fresh-clone run once) is only noted."""

    def in_the_original_temp(where: str, action: str) -> subprocess.CompletedProcess:
        body = (
            "import os, pathlib\n"
            "def test_writes_into_the_original_temp_folder():\n"
            "    tmp = pathlib.Path(os.environ['KIT_TEST_ORIGINAL_TMPDIR'])\n"
            f"    {action}\n"
        )
        (tmp_path / where).mkdir()
        return inner_session(tmp_path / where, body)[0]

    done = in_the_original_temp("file", "(tmp / 'vllm_test.log').write_text('x')")
    assert done.returncode == 0, done.stdout[-2000:]
    assert f"note: {tmp_path / 'file' / 'vllm_test.log'} appeared during the session" in done.stdout
    done = in_the_original_temp("folder", "(tmp / 'ray').mkdir()")
    assert done.returncode == 1, done.stdout[-2000:]
    folder = tmp_path / "folder" / "ray"
    assert f"written outside the session's folders and the checkout: {folder}" in done.stdout


def test_a_clean_session_passes_and_removes_its_folder(tmp_path: Path) -> None:
    body = (
        "import os, pathlib, subprocess, sys\n"
        "def test_clean(tmp_path):\n"
        f"    pathlib.Path({str(tmp_path / 'root')!r}).write_text(str(tmp_path))\n"
        "    (pathlib.Path.home() / '.ray').mkdir()\n"
        "    (pathlib.Path.home() / '.ray' / 'auth_token').write_text('x')  # its own HOME: fine\n"
        "    subprocess.run(['true'], check=True)\n"
    )
    done, home = inner_session(tmp_path, body)
    assert done.returncode == 0, done.stdout[-2000:]
    inner_tmp = Path((tmp_path / "root").read_text())
    assert inner_tmp.is_relative_to(tmp_path) and not inner_tmp.exists()  # the session's folder is gone
    assert list(home.iterdir()) == []


TOOLS = [
    "tests/test_ray.py::test_a_driver_without_the_token_is_told_how_to_get_it",
    "tests/test_engine_process.py::test_start_answer_and_interrupt_leaves_nothing_behind",
    "tests/test_report.py::test_notebook_04_through_papermill",
    "tests/test_report.py::test_checker_sees_blocked_network",
]
"""Tests of this suite that between them start every tool it uses but vLLM (whose caches and config
follow XDG_CACHE_HOME / XDG_CONFIG_HOME like the others): Ray (a token, its daemons, a driver),
transformers serve (and the kit's launcher cache), a Jupyter kernel with matplotlib, Chromium."""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_suite_writes_nothing_outside_its_folders_and_the_checkout(
    tmp_path: Path, demo_model: Path
) -> None:
    """The suite's own tests, run as a session of their own whose HOME and temp folder nobody else
    writes: afterwards both hold nothing new (the session's folder, inside the temp folder, is removed
    when it passes). The end-of-session check of the whole suite looks at the shared HOME's top level
    only, where other work on the machine would rarely write."""
    home = tmp_path / "original-home"
    home.mkdir()
    # directly under the system's temp folder: Ray's socket paths below it must stay under 108 bytes
    tmp = Path(tempfile.mkdtemp(dir=os.environ[isolation.ORIGINAL_TMP]))
    try:
        env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "KIT_REQUIRE_ENGINES": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TOOLS]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=840)
        ran = f"{len(TOOLS)} passed" if shutil.which("chromium") else f"{len(TOOLS) - 1} passed, 1 skipped"
        assert done.returncode == 0 and ran in done.stdout, done.stdout[-3000:]
        assert list(home.iterdir()) == [] and list(tmp.iterdir()) == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
