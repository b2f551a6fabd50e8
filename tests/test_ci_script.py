"""`.ci/run` reports itself (issue 33): the wall time of the install and of the tests, the load
average, and `make test`'s exit status; `make test` lists pytest's 15 slowest tests. Run here with a
`make`, a `kit` and a `chromium` that only say they were called."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_checkout(tmp_path: Path, test_exit: int) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    (repo / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    scripts = {
        bin_dir / "make": f'echo "make $*"; [ "$1" = test ] && exit {test_exit}; exit 0',
        bin_dir / "chromium": "exit 0",
        repo / ".venv" / "bin" / "kit": 'echo "kit $*"',
    }
    for path, body in scripts.items():
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)
    return repo, {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_ci_run_prints_the_install_and_test_times_and_passes_the_exit_status_on(tmp_path: Path) -> None:
    for code in (0, 2):
        repo, env = fake_checkout(tmp_path / str(code), code)
        done = subprocess.run(
            ["bash", str(repo / ".ci" / "run")], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == code, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        load = r"load average \d+\.\d+ \d+\.\d+ \d+\.\d+"
        assert re.fullmatch(rf"ci: started \d{{4}}-\d\d-\d\d \d\d:\d\d UTC at \S+, {load}", lines[0])
        assert "make -j3 venv engine-vllm engine-sglang" in lines and "kit demo-assets" in lines
        assert re.fullmatch(rf"ci: install and demo model \d+ min \d\d s, {load}", lines[-3]), lines
        assert lines[-2] == "make test"
        assert re.fullmatch(
            rf"ci: tests \d+ min \d\d s \(exit {code}\), {load}; in all \d+ min \d\d s", lines[-1]
        ), lines


def test_make_test_lists_the_15_slowest_tests() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    pytest_line = next(line for line in recipe.splitlines() if "-m pytest" in line)
    assert "--durations=15" in pytest_line.split()
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_test_runs_two_workers_that_take_whole_units(tmp_path: Path) -> None:
    """`make test` runs two pytest-xdist workers; each takes whole units of work (tests/conftest.py's
    `units`): a file whole (its module fixtures built once), and the files that share the session's
    demo run or its vLLM server together. Run here on two small files, as a session with a HOME and
    temp folder of its own (the other worker's tests write into this session's)."""
    from conftest import units

    recipe = (ROOT / "Makefile").read_text().split("\ntest:\n", 1)[1].split("\n\n", 1)[0]
    pytest_line = next(line for line in recipe.splitlines() if "-m pytest" in line).split()
    assert "--dist" in pytest_line and pytest_line[pytest_line.index("--dist") + 1] == "loadfile"
    assert pytest_line[pytest_line.index("-n") + 1] == "$(TEST_WORKERS)"
    assert "--no-loadscope-reorder" in pytest_line  # the units in conftest's order, most slow tests first
    of = units()
    assert of["test_vllm_engine.py"] == of["test_demo_model.py"]
    assert of["test_pipeline.py"] == of["test_lab.py"] == of["test_export.py"]
    assert of["test_ray.py"] == "test_ray.py" and of["test_plan.py"] == "test_plan.py"
    files = ["tests/test_layout.py", "tests/test_plan.py"]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-v",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "--dist",
        "loadfile",
        *files,
    ]
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path)}
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    ran = re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED (tests/\S+?)::", done.stdout)
    assert {f for _, f in ran} == set(files), done.stdout[-3000:]
    workers = {f: {w for w, g in ran if g == f} for f in files}
    assert all(len(w) == 1 for w in workers.values()), workers
