"""A speculative arm whose server dies under the sweep, on the real vLLM (CPU build): seen at once,
named, restarted, measured again, and given up when it keeps dying (issue 45).

`kit decide` measures plain decoding and n-gram k=1 side by side. A watcher in this test kills the
n-gram server (SIGKILL of vLLM's API server, the way SGLang's launcher takes its tree down when its
scheduler fails) half a second into its first level, and again into its second level. Each level
lasts at least LEVEL_S, far longer than the watcher's delay even on a loaded machine: a kill that
landed after its level had ended hit the next level instead (a two-second level, a fresh clone's
suite beside the other worker).
With `decide.crash_restarts: 1` the first crash is restarted and its level measured again; the
second gives the arm up. A dead server is never a measurement: its level stops at once (not after
thousands of refused connections), the arm is `crashed` in sweep.parquet and decision.json, and the
decision, made on plain decoding alone, says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from conftest import REPO
from engines import vllm_engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
KILL_AT = ("round 0 sweep spec_k1 at 1", "round 0 sweep spec_k1 at 4")
"""The measurements whose server the watcher kills (as the sweep log names them on `start`)."""
KILL_AFTER_S = 0.5
"""Seconds after a level's start line that its server is killed: requests are out by then."""
LEVEL_S = 6
"""Seconds each level lasts at least: the kill lands inside it with seconds to spare."""


def params_file(tmp: Path, demo_model: Path) -> Path:
    params = yaml.safe_load((REPO / "params" / "demo-vllm.yaml").read_text())
    params["run"] = "crashing"
    params["output_dir"] = str(tmp / "outputs")
    params["model"]["path"] = str(demo_model)
    params["engine"] = {
        **vllm_engine(extra_args=["--dtype", "float32", "--enforce-eager"]),
        "speculative": {"algorithm": "NGRAM"},
    }
    params["data"]["demo_fixtures"] = str(tmp / "data")
    for s in params["data"]["sources"]:
        s["count"] = 2
        s["data_files"] = [str(tmp / "data" / Path(f).name) for f in s["data_files"]]
    params["decide"].update(
        concurrencies=[1, 4],
        num_prompts=8,
        max_tokens=16,
        spec_steps=[1],
        repetitions=1,
        level_s=LEVEL_S,
        servers="together",
        crash_restarts=1,
    )
    path = tmp / "crashing.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def speculative_server() -> psutil.Process | None:
    """vLLM's API server of the n-gram arm (its command line carries the speculative config)."""
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "vllm.entrypoints" in cmd and "--speculative-config" in cmd and "kit/engines/reaper" not in cmd:
            return p
    return None


def kill_during(log: Path, marks: tuple[str, ...], stop: threading.Event, killed: list[str]) -> None:
    """SIGKILL the n-gram server `KILL_AFTER_S` after the sweep log says each of `marks` started."""
    left = list(marks)
    while left and not stop.is_set():
        text = log.read_text() if log.exists() else ""
        if f"start {left[0]}" in text:
            time.sleep(KILL_AFTER_S)
            server = speculative_server()
            if server is not None:
                os.kill(server.pid, signal.SIGKILL)
                killed.append(left[0])
            left.pop(0)
        time.sleep(0.1)


def test_a_speculative_server_that_dies_is_named_retried_and_given_up(
    tmp_path: Path, demo_model: Path
) -> None:
    path = params_file(tmp_path, demo_model)
    run = tmp_path / "outputs" / "crashing"
    stop, killed = threading.Event(), []
    watcher = threading.Thread(target=kill_during, args=(run / "logs" / "sweep.log", KILL_AT, stop, killed))
    watcher.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kit.cli", "decide", str(path)],
            capture_output=True,
            text=True,
            timeout=840,
        )
    finally:
        stop.set()
        watcher.join()
    assert done.returncode == 0, done.stderr[-4000:]
    assert killed == list(KILL_AT), (killed, (run / "logs" / "sweep.log").read_text())

    runs = pd.read_parquet(run / "sweep_runs.parquet")
    dead = runs[runs.status == "crashed"]
    assert list(zip(dead.arm, dead.concurrency, dead.restarted, strict=True)) == [
        ("spec_k1", 1, True),
        ("spec_k1", 4, False),
    ], runs[["arm", "concurrency", "status", "restarted", "requests"]]
    # stopped at once: the requests out when it died failed, never thousands sent to a closed port
    # (each worker may have sent one more before it saw), and no figure
    assert (dead.errors <= 2 * dead.concurrency).all(), dead[["concurrency", "requests", "errors"]]
    assert (dead.duration_s < LEVEL_S).all() and dead.output_tok_s.isna().all(), dead.duration_s
    assert (dead.crash_exit_code == 128 + signal.SIGKILL).all() and dead.crash_error.isna().all()
    assert "was killed by SIGKILL (exit 137) while serving, with no error in its log" in dead.reason.iloc[0]
    again = runs[(runs.arm == "spec_k1") & (runs.concurrency == 1) & (runs.status == "ok")]
    assert len(again) == 1 and again.output_tok_s.iloc[0] > 0, "measured again on the restarted server"
    assert (runs[runs.arm == "plain"].status == "ok").all()

    sweep = pd.read_parquet(run / "sweep.parquet")
    spec = sweep[sweep.arm == "spec_k1"]
    assert set(spec.status) == {"crashed"} and spec.output_tok_s.isna().all(), spec
    assert all("decide.crash_restarts: 1" in r and "What to try" in r for r in spec.reason)

    decision = json.loads((run / "decision.json").read_text())
    assert decision["decided_by"] == "measured in part" and decision["arm"]["k"] == 0
    assert decision["unmeasured"]["spec_k1"].startswith("crashed: spec_k1's server was killed by SIGKILL")
    assert [(c["concurrency"], c["restarted"]) for c in decision["crashes"]] == [(1, True), (4, False)]
    assert any(r.startswith("spec_k1 crashed and is not chosen: ") for r in decision["reasons"])
    assert not any("spec_k1 could not be measured" in r for r in decision["reasons"]), decision["reasons"]
    log = (run / "logs" / "sweep.log").read_text()
    assert "restarting it to measure the level again" in log and "the arm is given up" in log
