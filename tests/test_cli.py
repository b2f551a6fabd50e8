"""The `kit` command from the shell: bad input ends with one clear message, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KIT = [sys.executable, "-m", "kit.cli"]


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, *args], capture_output=True, text=True, timeout=300)


def assert_clear_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout
    for n in needles:
        assert n in done.stderr, done.stderr


def test_help_lists_every_command():
    out = kit("--help").stdout
    for cmd in (
        "run",
        "probe",
        "decide",
        "generate",
        "analyse",
        "report",
        "compare",
        "demo-assets",
        "adapters",
    ):
        assert cmd in out


def test_missing_params_file():
    assert_clear_error(kit("generate", "nope.yaml"), "params file not found: nope.yaml")


def test_unknown_key(tmp_path: Path):
    f = tmp_path / "bad.yaml"
    f.write_text("model: {path: m}\ngenerate: {concurency: 8}\n")
    assert_clear_error(kit("generate", str(f)), str(f), "generate.concurency", "concurrency")


def test_model_path_missing(tmp_path: Path):
    f = tmp_path / "p.yaml"
    f.write_text("model: {path: no-such-model}\n")
    assert_clear_error(kit("generate", str(f)), "no-such-model does not exist", "model.demo: true")


def test_model_path_not_a_model(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    f = tmp_path / "p.yaml"
    f.write_text("model: {path: empty}\n")
    assert_clear_error(kit("decide", str(f)), "has no config.json")


def test_report_of_missing_run(tmp_path: Path):
    done = kit("report", str(tmp_path / "no-run"))
    assert done.returncode == 2 and "Traceback" not in done.stderr


@pytest.mark.slow
def test_bad_shard_spec(tmp_path: Path, write_params):
    assert_clear_error(kit("generate", str(write_params("s")), "--shard", "4/4"), "--shard 4/4")


def test_adapters_lists_the_six_sources():
    out = kit("adapters").stdout.split()
    for name in (
        "infinity_instruct",
        "webinstructsub",
        "codefeedback",
        "metamathqa",
        "hermes_fc",
        "agentinstruct",
    ):
        assert name in out
