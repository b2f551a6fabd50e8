"""Server lifecycle: a real `transformers serve`, the reaper, and every way a start can fail."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kit.engines import ExternalServer, ServerProcess, start_server
from kit.engines.launcher import Launcher
from kit.engines.process import free_port, port_in_use
from kit.engines.reaper import group_members
from kit.errors import EngineStartError, ModelDirError
from kit.params import RunParams

REPO = Path(__file__).resolve().parents[1]
REAPER = REPO / "kit" / "engines" / "reaper.py"


@pytest.fixture(scope="module")
def demo_model() -> Path:
    from kit.demo.model import ensure_demo_model

    return ensure_demo_model(REPO / ".cache" / "demo" / "model", quiet=True)


def params(model: Path | str, **engine: object) -> RunParams:
    return RunParams.model_validate({"run": "t", "model": {"path": str(model)}, "engine": engine})


def tree(pid: int) -> list[psutil.Process]:
    """`pid` and all its descendants."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def assert_all_gone(procs: list[psutil.Process], within_s: float) -> None:
    _, alive = psutil.wait_procs(procs, timeout=within_s)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {[(p.pid, p.cmdline()) for p in alive]}"


def accepts_connections(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --- the reaper on its own, with plain shell processes (fast) ---------------------------------

PARENT_SCRIPT = """
import os, subprocess, sys, time
server = ["sh", "-c", "sleep 300 & sleep 300"]
cmd = [sys.executable, sys.argv[1], "--parent-pid", str(os.getpid()), "--grace", "1", "--", *server]
reaper = subprocess.Popen(cmd, start_new_session=True)
print(reaper.pid, flush=True)
time.sleep(300)
"""


def test_reaper_kills_the_server_group_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_SCRIPT, str(REAPER)], stdout=subprocess.PIPE, text=True
    )
    reaper_pid = int(parent.stdout.readline())  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while len(tree(reaper_pid)) < 4 and time.monotonic() < deadline:  # reaper, sh, 2 x sleep
        time.sleep(0.1)
    procs = tree(reaper_pid)
    assert len(procs) == 4, [p.cmdline() for p in procs]
    server_pgid = os.getpgid(procs[1].pid)
    assert server_pgid != os.getpgid(reaper_pid), "the server runs in a process group of its own"
    parent.kill()
    parent.wait()
    assert_all_gone(procs, within_s=5)
    assert group_members(server_pgid) == []


def test_reaper_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    cmd = [sys.executable, str(REAPER), "--parent-pid", str(os.getpid()), "--grace", "0.5", "--",
           "sh", "-c", "trap '' TERM; sleep 300"]  # fmt: skip
    reaper = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    procs = tree(reaper.pid)
    reaper.send_signal(signal.SIGTERM)
    _, err = reaper.communicate(timeout=10)
    assert "SIGKILL" in err, err
    assert reaper.returncode == 128 + signal.SIGKILL
    assert_all_gone(procs, within_s=5)


def test_kill_9_of_the_reaper_takes_the_server_with_it() -> None:
    """The kernel kills the server when its reaper dies outright (Linux: PR_SET_PDEATHSIG)."""
    cmd = [sys.executable, str(REAPER), "--parent-pid", str(os.getpid()), "--", "sh", "-c", "sleep 300; :"]
    reaper = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while len(tree(reaper.pid)) < 3 and time.monotonic() < deadline:  # reaper, sh, sleep
        time.sleep(0.05)
    server, sleeper = tree(reaper.pid)[1:]
    reaper.kill()
    reaper.wait()
    try:
        assert_all_gone([server], within_s=3)
    finally:
        sleeper.kill()  # the rest of the server's group: the kit's ServerProcess.stop cleans that up


# --- failures before or at start ----------------------------------------------------------------


def test_a_taken_port_is_a_clear_error_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        srv = ServerProcess(params(tmp_path, port=port), tmp_path / "logs")
        with pytest.raises(EngineStartError, match=f"port {port} .* already in use"):
            srv.start()
        assert srv.pid is None and not (tmp_path / "logs" / "server.log").exists()


def test_a_missing_model_dir_is_reported_before_launching(tmp_path: Path) -> None:
    srv = ServerProcess(params(tmp_path / "nowhere"), tmp_path / "logs")
    with pytest.raises(ModelDirError, match="does not exist"):
        srv.start()
    assert srv.pid is None


def test_external_server_that_does_not_answer_times_out(tmp_path: Path) -> None:
    p = params(tmp_path, flavor="external", base_url=f"http://127.0.0.1:{free_port()}")
    srv = start_server(p, tmp_path)
    assert isinstance(srv, ExternalServer)
    assert not srv.alive()
    with pytest.raises(EngineStartError, match="did not answer"):
        srv.wait_ready(timeout=1.0)


@pytest.mark.slow
def test_a_bad_model_dir_ends_with_the_log_tail(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-model"
    bad.mkdir()
    (bad / "README.md").write_text("no config.json here\n")
    known = {"--continuous-batching", "--device", "--host", "--port", "--cb-max-batch-tokens"}
    srv = start_server(params(bad), tmp_path / "logs", name="bad", launcher=Launcher(frozenset(known)))
    with pytest.raises(EngineStartError) as info:
        with srv:
            pass
    assert isinstance(srv, ServerProcess)
    assert srv.flag_notes == ["--cb-num-blocks is not accepted by the installed launcher"]
    assert "==== kit: --cb-num-blocks is not accepted" in srv.log_path.read_text()
    msg = str(info.value)
    assert "exited with code" in msg and "What to do" in msg
    assert str(tmp_path / "logs" / "bad.log") in msg
    tail = srv.log_tail(30).splitlines()
    assert len(tail) == 30 and tail[-1] in msg, "the message carries the last lines of the server's log"
    assert not srv.alive()


# --- a real transformers serve ------------------------------------------------------------------


@pytest.mark.slow
def test_start_answer_and_interrupt_leaves_nothing_behind(demo_model: Path, tmp_path: Path) -> None:
    """A KeyboardInterrupt (a notebook's interrupt button) inside the `with` block stops the server."""
    logs = tmp_path / "logs"
    srv = start_server(params(demo_model), logs)
    assert isinstance(srv, ServerProcess)
    with pytest.raises(KeyboardInterrupt), srv:
        assert srv.alive()
        port = srv.port
        assert port is not None and accepts_connections(port)
        procs = tree(srv.pid or 0)
        assert any("serve" in p.cmdline() for p in procs), [p.cmdline() for p in procs]
        log = (logs / "server.log").read_text()
        assert log.startswith("==== kit ") and str(demo_model) in log.splitlines()[0]
        raise KeyboardInterrupt
    assert not srv.alive() and srv.exit_code is not None
    assert_all_gone(procs, within_s=5)
    assert not accepts_connections(port) and not port_in_use("127.0.0.1", port)


@pytest.mark.slow
def test_a_killed_reaper_orphans_nothing_and_the_server_restarts(demo_model: Path, tmp_path: Path) -> None:
    srv = start_server(params(demo_model), tmp_path / "logs")
    assert isinstance(srv, ServerProcess)
    with srv:
        old = tree(srv.pid or 0)
        os.kill(old[0].pid, signal.SIGKILL)  # the reaper
        assert_all_gone(old[1:2], within_s=5)  # the server, by the kernel
        assert not srv.alive()
        srv.restart()  # what the pool does: also cleans what is left of the old server's group
        assert_all_gone(old, within_s=5)
        assert srv.alive() and accepts_connections(srv.port or 0)
        new = tree(srv.pid or 0)
    assert_all_gone(new, within_s=10)


def test_a_port_taken_between_the_kits_check_and_the_servers_bind_gets_another_port(
    demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race seen in a CI run beside another: a restart's port, free when the kit checked, was
    bound by another process before `transformers serve` had loaded (exit 3, Errno 98). The check
    is made to say 'free' for a port this test holds; the kit starts again on a fresh one."""
    from kit.engines import process

    srv = ServerProcess(params(demo_model), tmp_path / "logs")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        srv.port = taken  # as a restart keeps its port
        monkeypatch.setattr(process, "port_in_use", lambda host, port: False)
        with srv:
            assert srv.port != taken and accepts_connections(srv.port or 0)
            log = srv.log_path.read_text()
    assert f"port {taken}:" in log and "address already in use" in log, log[-2000:]
    assert log.count("==== kit ") == 2, "one failed start, one on another port"


def test_a_port_the_user_named_is_not_swapped_for_another(
    demo_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race on engine.port: the user's address is kept, and the failure says so."""
    from kit.engines import process

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        monkeypatch.setattr(process, "port_in_use", lambda host, port: False)
        with pytest.raises(EngineStartError, match="the server's port is already taken"):
            with ServerProcess(params(demo_model, port=taken), tmp_path / "logs"):
                pass


CHILD_SCRIPT = """
import json, sys, time
from pathlib import Path
from kit.engines.process import ServerProcess
from kit.params import RunParams
srv = ServerProcess(RunParams.model_validate_json(sys.argv[1]), Path(sys.argv[2])).start().wait_ready(180)
print(json.dumps({"reaper": srv.pid, "port": srv.port}), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_kill_9_of_the_kit_takes_the_server_down(demo_model: Path, tmp_path: Path) -> None:
    p = params(demo_model)
    kit = subprocess.Popen([sys.executable, "-c", CHILD_SCRIPT, p.model_dump_json(), str(tmp_path)],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        started = json.loads(kit.stdout.readline() or "{}")  # type: ignore[union-attr]
        assert started, (
            f"the kit process failed to start a server; log:\n{(tmp_path / 'server.log').read_text()}"
        )
        procs = tree(started["reaper"])
        assert accepts_connections(started["port"])
    finally:
        kit.kill()
        kit.wait()
    t0 = time.monotonic()
    assert_all_gone(procs, within_s=10)
    assert not accepts_connections(started["port"])
    assert time.monotonic() - t0 < 10
    assert f"parent {kit.pid} is gone: stopping the server" in (tmp_path / "server.log").read_text()
