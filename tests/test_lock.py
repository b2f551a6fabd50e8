"""One writer per run folder: a second writer is refused by name; a dead holder blocks nothing;
static shards of one plan share the folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.errors import RunFolderError
from kit.generate.lock import RunLock

HOLD = """
import sys, time
from pathlib import Path
from kit.generate.lock import RunLock
with RunLock(Path(sys.argv[1]), sys.argv[2]):
    print("held", flush=True)
    time.sleep(300)
"""


def holder(root: Path, tag: str = "") -> subprocess.Popen:
    """Another process holding the lock of `root` (shard `tag`)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), tag], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"  # type: ignore[union-attr]
    return proc


def test_a_second_writer_is_refused_with_the_holders_pid_host_and_start(tmp_path):
    proc = holder(tmp_path)
    try:
        with pytest.raises(RunFolderError) as info, RunLock(tmp_path):
            pass
        msg = str(info.value)
        assert (
            f"another kit generate is writing into {tmp_path}: pid {proc.pid} on {socket.gethostname()}"
            in msg
        )
        assert "started 20" in msg
    finally:
        proc.kill()
        proc.wait()


def test_a_holder_killed_outright_leaves_no_stale_lock(tmp_path):
    proc = holder(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (tmp_path / ".generate.lock").exists(), "the file stays; the lock on it died with its holder"
    with RunLock(tmp_path):
        assert str(os.getpid()) in (tmp_path / ".generate.lock").read_text()


def test_static_shards_share_the_folder_but_not_a_shard(tmp_path):
    other = holder(tmp_path, "s1of2")
    try:
        with RunLock(tmp_path, "s0of2"):  # another shard of the same plan: fine
            with pytest.raises(RunFolderError, match=f"pid {os.getpid()} "), RunLock(tmp_path, "s0of2"):
                pass
        with pytest.raises(RunFolderError, match=f"--shard session pid {other.pid} "), RunLock(tmp_path):
            pass  # a whole run while a shard runs
    finally:
        other.kill()
        other.wait()
    whole = holder(tmp_path)
    try:
        start = time.monotonic()
        with pytest.raises(RunFolderError, match=f"pid {whole.pid} "), RunLock(tmp_path, "s0of2"):
            pass
        assert time.monotonic() - start < 5, "refused at once, not after a wait"
    finally:
        whole.kill()
        whole.wait()


def test_a_shard_of_another_split_is_refused_while_one_runs(tmp_path):
    """--shard 0/3 beside a running --shard 0/2 would divide the plan differently (issue 19, item 8)."""
    other = holder(tmp_path, "s0of2")
    try:
        with pytest.raises(RunFolderError, match=f"--shard 0/3: .* --shard 0/2 \\(pid {other.pid} ") as info:
            with RunLock(tmp_path, "s0of3"):
                pass
        assert "run --shard i/2" in str(info.value)
        with RunLock(tmp_path, "s1of2"):  # the same split: side by side
            pass
    finally:
        other.kill()
        other.wait()
    with RunLock(tmp_path, "s0of3"):  # once the other split is done, a new split may start
        pass


def test_a_session_that_ends_removes_its_lock_files(tmp_path):
    """A finished run leaves no `.generate.lock`; shards remove their own at once and the folder's
    shared one when the last of them ends."""
    with RunLock(tmp_path):
        assert (tmp_path / ".generate.lock").exists()
    assert not list(tmp_path.glob(".generate*.lock"))
    other = holder(tmp_path, "s1of2")
    try:
        with RunLock(tmp_path, "s0of2"):
            pass
        assert sorted(p.name for p in tmp_path.glob(".generate*.lock")) == [
            ".generate-s1of2.lock",
            ".generate.lock",
        ]
    finally:
        other.terminate()  # a holder that ends by a signal releases through the kernel: files stay
        other.wait()
    with RunLock(tmp_path, "s0of2"):  # the last shard to end removes the shared file too
        pass
    assert [p.name for p in tmp_path.glob(".generate*.lock")] == [".generate-s1of2.lock"]


def test_a_writer_that_locked_a_removed_file_takes_the_one_there_now(tmp_path, monkeypatch):
    """The race the removal opens: a writer opens the lock file, its holder ends (removing it), the
    writer's flock then succeeds on the removed file. It must see that and lock the path's file, or a
    third writer would be let in beside it."""
    import fcntl

    first = RunLock(tmp_path).__enter__()
    real, raced = fcntl.flock, []

    def holder_ends_first(fd: int, mode: int) -> None:
        if not raced:
            raced.append(fd)
            first.release()  # between the writer's open and its flock
        real(fd, mode)

    monkeypatch.setattr(fcntl, "flock", holder_ends_first)
    with RunLock(tmp_path):
        monkeypatch.setattr(fcntl, "flock", real)
        assert raced and (tmp_path / ".generate.lock").exists()
        argv = [sys.executable, "-c", HOLD, str(tmp_path), ""]
        third = subprocess.run(argv, capture_output=True, text=True)
        assert third.returncode == 1 and "another kit generate is writing into" in third.stderr
