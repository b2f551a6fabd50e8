"""Faults a long run meets, injected by an SGLang-shaped stand-in server (tests/fake_sglang).

The stand-in serves answers that are HTTP 200 but no completion (no choices, null finish_reason,
SGLang's `abort`) on a schedule read from a file, and is killed, frozen and waited for with real
signals. What is under test is the kit: what it stores, retries, records and exits with.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from kit.engines.process import free_port
from kit.generate.completions import FINISHED
from kit.params import load_params
from kit.runfolder import RunFolder

pytestmark = pytest.mark.slow
FAKE = Path(__file__).resolve().parent / "fake_sglang"
KIT = [sys.executable, "-m", "kit.cli"]
MARKER = "ALWAYS-ABORT"


def prompt_source(tmp_path: Path, n: int, marked: int = 0) -> dict:
    """A prompt_column source of `n` distinct prompts, the first `marked` of them carrying MARKER."""
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": f"{MARKER if i < marked else 'Question'} {i}: what is {i} + {i}?"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"name": "q", "adapter": "prompt_column", "dataset": "json", "data_files": [str(path)]}


def fake_engine(tmp_path: Path, faults: dict) -> dict:
    spec = tmp_path / "faults.json"
    spec.write_text(json.dumps(faults))
    env = {"PYTHONPATH": str(FAKE), "FAKE_SGLANG_FAULTS": str(spec), "FAKE_SGLANG_STEP_S": "0.01"}
    return {"flavor": "sglang", "startup_timeout_s": 120, "env": env}


def digest(messages: list[dict]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


def rows_table(folder: RunFolder):
    return pq.read_table(folder.shard_paths()).to_pylist()


def failures(folder: RunFolder) -> list[dict]:
    return [json.loads(x) for x in folder.failures.read_text().splitlines()]


def test_http_200_without_a_completion_is_retried_never_stored(write_params, tmp_path):
    """No choices, empty content with a null finish_reason, `abort`: retried; persisting ones are failures."""
    params_file = write_params(
        "bad",
        data={"sources": [prompt_source(tmp_path, 24, marked=2)]},
        engine=fake_engine(tmp_path, {"bad_first": 6, "bad_marker": MARKER}),
        generate={"concurrency": 4, "retries": 2, "sampling": {"max_tokens": 8, "seed": 0}},
    )
    folder = RunFolder(load_params(params_file).run_dir)
    done = subprocess.run([*KIT, "generate", str(params_file)], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr[-3000:]  # incomplete: two prompts never got a completion
    rows = rows_table(folder)
    assert len(rows) == 22 and len({r["id"] for r in rows}) == 22
    for r in rows:
        assert r["finish_reason"] in FINISHED and r["completion"]
        assert r["completion"].startswith(f"re:{digest(r['messages'])} "), (
            "a row holds another prompt's answer"
        )
    failed = failures(folder)
    assert {f["reason"] for f in failed} == {"bad_answer"} and not any(f["permanent"] for f in failed)
    assert len({f["id"] for f in failed}) == 2 and all(f["attempts"] == 3 for f in failed)
    assert all(
        MARKER in json.dumps(r)
        for r in pq.read_table(folder.prompts).to_pylist()
        if r["id"] in {f["id"] for f in failed}
    )
    manifest = json.loads(folder.manifest.read_text())
    assert manifest["complete"] is False and manifest["left"] == 2
    assert manifest["status"] == "incomplete" and manifest["exit_code"] == 3
    assert "incomplete" in done.stderr and "rerun" in done.stderr


def engine_processes(kit_pid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.Process(kit_pid).children(recursive=True):
        try:
            cmdline = " ".join(p.cmdline())
            if "sglang.launch_server" in cmdline and "reaper.py" not in cmdline:  # the server, not its reaper
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_for(cond, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def answered(folder: RunFolder) -> int:
    """Rows on disk so far (shards appear every few rows)."""
    paths = folder.shard_paths()
    return pq.read_table(paths, columns=["id"]).num_rows if paths else 0


def test_server_killed_three_times_at_concurrency_16(write_params, tmp_path):
    """kill -9 with 16 requests in flight, three times (once also the replacement while it starts),
    while 10% of answers are HTTP 500 (so that some requests sleep in their backoff): all wait for
    each restart, none is lost."""
    params_file = write_params(
        "kills",
        data={"sources": [prompt_source(tmp_path, 600)]},
        engine=fake_engine(tmp_path, {"error_rate": 0.1}),
        generate={
            "concurrency": 16,
            "retries": 5,
            "shard_rows": 20,
            "sampling": {"max_tokens": 16, "seed": 0},
        },
    )
    folder = RunFolder(load_params(params_file).run_dir)
    log = open(tmp_path / "kills.log", "w")
    proc = subprocess.Popen([*KIT, "generate", str(params_file)], stdout=log, stderr=log)
    killed: list[psutil.Process] = []
    for n in (60, 220, 380):
        wait_for(lambda n=n: answered(folder) >= n or proc.poll() is not None, 120, f"{n} rows")
        assert proc.poll() is None, (tmp_path / "kills.log").read_text()[-3000:]
        servers = engine_processes(proc.pid)
        assert servers, "no server process found under the kit"
        for p in servers:
            p.kill()
        killed += servers
        if n == 220:  # and its replacement while it starts: the restart is tried again
            wait_for(lambda k=killed: set(engine_processes(proc.pid)) - set(k), 60, "a new server")
            for p in set(engine_processes(proc.pid)) - set(killed):
                p.kill()
                killed.append(p)
    assert proc.wait(timeout=300) == 0, (tmp_path / "kills.log").read_text()[-3000:]
    manifest = json.loads(folder.manifest.read_text())
    assert manifest["complete"] and manifest["server_restarts"] == 4
    rows = rows_table(folder)
    assert len(rows) == 600 == len({r["id"] for r in rows})
    assert all(r["completion"].startswith(f"re:{digest(r['messages'])} ") for r in rows)
    assert folder.failures.read_text() == "", "a request was written off"
    assert not [p for p in killed if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def start_external(port: int, log: Path) -> subprocess.Popen:
    """The stand-in as a server the kit does not own (flavor external)."""
    cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(FAKE), "FAKE_SGLANG_STEP_S": "0.01"}
    return subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def test_an_external_server_that_freezes_or_dies_is_waited_for(write_params, tmp_path):
    """The kit cannot restart a server it does not own: it waits, and loses no request."""
    port = free_port()
    server = start_external(port, tmp_path / "external.log")
    params_file = write_params(
        "ext",
        data={"sources": [prompt_source(tmp_path, 300)]},
        engine={"flavor": "external", "base_url": f"http://127.0.0.1:{port}", "startup_timeout_s": 120},
        model={"served_name": "m"},
        generate={"concurrency": 8, "hang_timeout_s": 3, "retries": 1, "sampling": {"max_tokens": 16}},
    )
    folder = RunFolder(load_params(params_file).run_dir)
    log = open(tmp_path / "ext.log", "w")
    proc = subprocess.Popen([*KIT, "generate", str(params_file)], stdout=log, stderr=log)
    try:
        wait_for(lambda: answered(folder) >= 40 or proc.poll() is not None, 120, "40 rows")
        server.send_signal(signal.SIGSTOP)  # frozen well beyond the hang timeout
        time.sleep(15)
        server.send_signal(signal.SIGCONT)
        wait_for(lambda: answered(folder) >= 150 or proc.poll() is not None, 120, "150 rows")
        server.kill()  # gone; someone starts it again a little later, on the same port
        server.wait()
        time.sleep(8)
        server = start_external(port, tmp_path / "external.log")
        assert proc.wait(timeout=300) == 0, (tmp_path / "ext.log").read_text()[-3000:]
    finally:
        proc.kill()
        server.kill()
    manifest = json.loads(folder.manifest.read_text())
    assert manifest["complete"] and manifest["server_restarts"] >= 2
    assert len(set(pq.read_table(folder.shard_paths(), columns=["id"]).column("id").to_pylist())) == 300
    assert folder.failures.read_text() == "", "a request was written off while the server was away"
    assert "waiting for it to answer again" in (tmp_path / "ext.log").read_text()


def test_a_closed_pipe_loses_no_row_and_keeps_the_exit_code(write_params, tmp_path):
    """`kit generate P.yaml 2>&1 | timeout 12 cat > /dev/null`, a dropped non-interactive ssh: whoever
    read the kit's output is gone. Every answered row still reaches disk (one shard at the end: none
    is flushed before) and the exit code is the run's, not 1."""
    params_file = write_params(
        "pipe",
        data={"sources": [prompt_source(tmp_path, 300)]},
        engine=fake_engine(tmp_path, {}),
        generate={"concurrency": 16, "shard_rows": 1000, "shard_seconds": 600,
                  "sampling": {"max_tokens": 8, "seed": 0}},
    )  # fmt: skip
    folder = RunFolder(load_params(params_file).run_dir)
    pipes = {name: os.pipe() for name in ("stdout", "stderr")}  # each alone failed before: both at once
    streams = {name: write for name, (_, write) in pipes.items()}
    env = {**os.environ, "KIT_PROGRESS": "text"}  # progress lines on stderr all along
    proc = subprocess.Popen([*KIT, "generate", str(params_file)], env=env, **streams)
    for read, write in pipes.values():  # the reader goes away at once: every write the kit makes is EPIPE
        os.close(write)
        os.close(read)
    assert proc.wait(timeout=300) == 0
    rows = rows_table(folder)
    assert len(rows) == 300 and len({r["id"] for r in rows}) == 300
    assert json.loads(folder.manifest.read_text())["exit_code"] == 0


def test_a_server_that_answers_health_but_makes_no_token_is_restarted(write_params, tmp_path):
    """From its 40th request on, the stand-in hangs every request while /health still answers: the
    kit sees its token counters stand still with requests out, restarts it within the hang timeout,
    and every row is written once; none is written off as timed out."""
    params_file = write_params(
        "stuck",
        data={"sources": [prompt_source(tmp_path, 120)]},
        engine=fake_engine(tmp_path, {"stuck_after": 40}),
        generate={"concurrency": 8, "hang_timeout_s": 6, "request_timeout_s": 120, "retries": 1,
                  "max_server_restarts": 3, "sampling": {"max_tokens": 8, "seed": 0}},
    )  # fmt: skip
    folder = RunFolder(load_params(params_file).run_dir)
    spec = tmp_path / "faults.json"
    log = tmp_path / "stuck.log"
    proc = subprocess.Popen(
        [*KIT, "generate", str(params_file)], stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    wait_for(
        lambda: "made no token" in log.read_text() or proc.poll() is not None, 120, "the stuck server caught"
    )
    spec.write_text(json.dumps({}))  # the restarted server answers
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    text = log.read_text()
    silent = [int(s) for s in re.findall(r"made no token for (\d+) s", text)]
    assert silent and max(silent) <= 8, (silent, text[-2000:])
    rows = rows_table(folder)
    assert len(rows) == 120 and len({r["id"] for r in rows}) == 120
    assert folder.failures.read_text() == ""
    assert json.loads(folder.manifest.read_text())["server_restarts"] >= 1


def test_a_first_use_compile_longer_than_the_hang_timeout_is_waited_for(write_params, tmp_path):
    """The server's first request pays a first-use compile (SGLang's flashinfer sampler took ~90 s on
    an H100; its /health fails meanwhile) that lasts well past the hang timeout: the kit waits for
    the first token within the start-up timeout instead, restarts nothing and writes every row. With
    the hang timeout alone (the kit before), each restart compiled anew: an H100's stage 3 started
    its server four times in 400 s and made no row."""
    params_file = write_params(
        "compile",
        data={"sources": [prompt_source(tmp_path, 40)]},
        engine=fake_engine(tmp_path, {"first_compile_s": 12}),
        generate={"concurrency": 8, "hang_timeout_s": 5, "request_timeout_s": 120, "retries": 1,
                  "max_server_restarts": 1, "sampling": {"max_tokens": 8, "seed": 0}},
    )  # fmt: skip
    folder = RunFolder(load_params(params_file).run_dir)
    log = tmp_path / "compile.log"
    with log.open("w") as out:
        done = subprocess.run([*KIT, "generate", str(params_file)], stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    assert done.returncode == 0, text[-3000:]
    server_log = (folder.logs / "server-0.log").read_text()
    assert server_log.count("injected fault first_compile") == 1, server_log[-2000:]
    assert json.loads(folder.manifest.read_text())["server_restarts"] == 0
    rows = rows_table(folder)
    assert len(rows) == 40 and len({r["id"] for r in rows}) == 40
    assert folder.failures.read_text() == ""
