"""Progress bars where stderr is a file: a line now and then, not a carriage-return frame per redraw."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BAR = """
import time
from kit.progress import progress
for _ in progress(range(300), desc="rows", unit="row"):
    time.sleep(0.01)
"""


def run_bar(log: Path, **env: str) -> str:
    with log.open("w") as f:  # a file: not a terminal
        done = subprocess.run(
            [sys.executable, "-c", BAR], stderr=f, cwd=REPO, env={**os.environ, **env}, timeout=120
        )
    assert done.returncode == 0
    return log.read_bytes().decode()  # as written: read_text would turn each \r into a newline


def test_a_bar_into_a_log_writes_a_few_plain_lines(tmp_path) -> None:
    """tqdm.auto redrew the bar in place ten times a second: hundreds of frames in a 3 s job's log."""
    env = {k: v for k, v in os.environ.items() if k != "KIT_PROGRESS"}
    text = run_bar(tmp_path / "log", **{**env, "KIT_PROGRESS": ""})
    lines = text.splitlines()
    assert "\r" not in text and 2 <= len(lines) <= 3, text  # the start, the end (and one between)
    assert lines[0].startswith("rows:   0%") and lines[-1].startswith("rows: 100%") and "300/300" in lines[-1]


def test_text_mode_keeps_its_redraws(tmp_path) -> None:
    """KIT_PROGRESS=text (notebooks under `kit run`): frames papermill echoes to the terminal."""
    text = run_bar(tmp_path / "log", KIT_PROGRESS="text")
    assert "\r" in text and "300/300" in text
