"""Run a server in its own process group and take the whole group down with the kit.

    python -m kit.engines.reaper --parent-pid PID [--grace S] -- COMMAND ARGS...

The kit starts this wrapper in a new session; the wrapper starts COMMAND in a process group of its
own and then watches two things: its parent (when the kit dies, even by `kill -9` or a killed
Jupyter kernel, the wrapper is re-parented) and the server. On parent death, SIGTERM, SIGINT or
SIGHUP it sends SIGTERM (and SIGCONT, so that a stopped server acts on it) to the server's group,
then SIGKILL after `--grace` seconds; when the server exits by itself, leftovers in its group get
the same treatment. Should the wrapper itself be killed outright (`kill -9`), the kernel kills the
server (Linux: PR_SET_PDEATHSIG, set in the server's process before it runs) and the kit cleans
up the rest of the group. Exit status: the server's.
Standard library only, so that it starts fast and works under any interpreter that has the kit.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.2
PR_SET_PDEATHSIG = 1
_stop_signal: list[int] = []


TEARDOWN = "to process group"
"""In the reaper's note as it signals the server's group ('sending SIGTERM to process group 123'):
what the server's processes write after it is their answer to being stopped, not why they died."""


def _note(msg: str) -> None:
    print(f"[kit reaper {os.getpid()}] {msg}", file=sys.stderr, flush=True)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel whether anything is left in the group
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def terminate_group(server: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the server's group, wait up to `grace` seconds for it to empty, then SIGKILL."""
    pgid = server.pid
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        server.poll()
        if not group_members(pgid):
            return
        _note(f"sending {sig.name} {TEARDOWN} {pgid}")
        try:
            os.killpg(pgid, sig)
            os.killpg(pgid, signal.SIGCONT)  # a stopped (SIGSTOP) process acts on SIGTERM only once continued
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            server.poll()
            if not group_members(pgid):
                return
            time.sleep(0.05)
    _note(f"process group {pgid} still has members after SIGKILL: {group_members(pgid)}")


def die_with_parent() -> Callable[[], None]:
    """A `preexec_fn` for the server: the kernel sends it SIGKILL when this wrapper dies, even by
    `kill -9` (Linux: PR_SET_PDEATHSIG; elsewhere the kit's own cleanup must do)."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the wrapper died before the request took effect
            os._exit(1)

    return preexec


def _on_signal(signum: int, _frame: object) -> None:
    _stop_signal.append(signum)


def supervise(cmd: list[str], parent_pid: int, grace: float) -> int:
    """Start `cmd` in its own group and stop the group when the parent dies or we are told to."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    # its own session, so its own process group; killed by the kernel if this wrapper is killed
    server = subprocess.Popen(cmd, start_new_session=True, preexec_fn=die_with_parent())
    _note(f"started server pid {server.pid} (process group {server.pid}); watching parent {parent_pid}")
    while server.poll() is None:
        if _stop_signal or os.getppid() != parent_pid:
            why = f"signal {_stop_signal[0]}" if _stop_signal else f"parent {parent_pid} is gone"
            _note(f"{why}: stopping the server")
            break
        time.sleep(POLL_S)
    terminate_group(server, grace)
    code = server.wait()
    _note(f"server exited with code {code}")
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    """Parse `--parent-pid PID [--grace S] -- CMD...` and supervise CMD."""
    parser = argparse.ArgumentParser(
        prog="python -m kit.engines.reaper", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given after --")
    if os.getppid() != args.parent_pid:
        _note(f"parent {args.parent_pid} is already gone: not starting {cmd[0]}")
        return 1
    return supervise(cmd, args.parent_pid, args.grace)


if __name__ == "__main__":
    sys.exit(main())
