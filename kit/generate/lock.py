"""One writer per run folder: a lock that names its holder and is released when the holder dies.

A whole run (`kit generate PARAMS`) holds `outputs/<run>/.generate.lock` exclusively; a static
shard (`--shard i/N`) holds that file shared plus its own `.generate-s<i>of<N>.lock`
exclusively, so shards of one plan run side by side on a shared folder while a second writer of
the same run or shard is refused with a message naming the holder (pid, host, start time), and so
is a shard of another split (`--shard 0/3` while `--shard 1/2` runs: the two would divide the plan
differently and each take the other's rows for copies). The
locks are `flock` locks: the kernel (or the NFS server, when the holder's lease ends) releases
them when the holder dies, even by `kill -9`, so a lock file left behind is never stale. A session
that ends removes its lock files while it still holds them alone (a shard the folder's shared file
only when no other shard holds it), so a finished run leaves none; a writer that locked a file its
holder removed meanwhile sees that the path no longer names it, and takes the file there now.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import re
import socket
import sys
from pathlib import Path
from types import TracebackType

from kit.errors import RunFolderError
from kit.generate.store import now_utc
from kit.runfolder import RunFolder, ShardView

log = logging.getLogger(__name__)
_BUSY = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)
_SHARD_TAG = re.compile(r"s(\d+)of(\d+)")


def holder_info() -> dict[str, object]:
    """What a lock file says about its holder."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_at": now_utc().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


def describe(path: Path) -> str:
    """The holder recorded in lock file `path`, in words."""
    try:
        h = json.loads(path.read_text())
        return f"pid {h['pid']} on {h['host']}, started {h['started_at']} ({h.get('command', '')})"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that did not record itself"


def _held(path: Path) -> bool:
    """Whether some process holds lock file `path` now (a file removed meanwhile: no)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _names(path: Path, fd: int) -> bool:
    """Whether `path` names the file open as `fd` (not one removed, or made anew since)."""
    try:
        here, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode)
    except OSError:
        return False
    return True


class RunLock:
    """Held for the whole of one `kit generate` session on `root` (shard `tag`, or the whole run)."""

    def __init__(self, root: Path, tag: str = "") -> None:
        self.root = root
        self.folder = RunFolder(root)
        self.folder_lock = self.folder.lock
        self.own_lock = ShardView(self.folder, tag).lock if tag else self.folder_lock
        self._fds: list[tuple[int, Path, int]] = []
        """(descriptor, lock file, flock mode) of each lock held."""

    def __enter__(self) -> RunLock:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            if self.own_lock is self.folder_lock:
                self._take(self.folder_lock, fcntl.LOCK_EX, record=True)
            else:
                self._take(self.folder_lock, fcntl.LOCK_SH, record=False)
                self._take(self.own_lock, fcntl.LOCK_EX, record=True)
                self._refuse_another_split()
        except BaseException:
            self.release()
            raise
        return self

    def _take(self, path: Path, mode: int, record: bool) -> None:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the servers (O_CLOEXEC)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in _BUSY:
                    raise RunFolderError(self._refusal(path)) from None
                log.warning(
                    "%s: this filesystem does not support file locks (%s); a second kit generate on "
                    "this run folder would not be refused",
                    path,
                    e,
                )
                return
            if _names(path, fd):
                break
            os.close(fd)  # its holder removed it as it ended: lock the file the path names now
        self._fds.append((fd, path, mode))
        if record:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder_info()) + "\n").encode(), 0)

    def _refusal(self, path: Path) -> str:
        holders = describe(path)
        if path == self.folder_lock and self.own_lock == self.folder_lock:
            shards = [p for p in self.folder.shard_locks() if _held(p)]
            if shards:  # --shard sessions hold the folder's lock shared
                holders = "; ".join(f"--shard session {describe(p)}" for p in shards)
        return (
            f"another kit generate is writing into {self.root}: {holders}. Wait for it to finish or stop "
            "it; two writers on one run folder would do all work twice. (The lock frees itself when "
            "its holder dies, even by kill -9.)"
        )

    def _refuse_another_split(self) -> None:
        """Shard sessions of one folder must split the plan alike: the same N."""
        mine = _SHARD_TAG.search(self.own_lock.name)
        for path in self.folder.shard_locks():
            other = _SHARD_TAG.search(path.name)
            if path == self.own_lock or not (mine and other) or other[2] == mine[2] or not _held(path):
                continue
            raise RunFolderError(
                f"--shard {mine[1]}/{mine[2]}: {self.root} is being written by --shard {other[1]}/{other[2]} "
                f"({describe(path)}). Shards of one run folder must all split the plan into the same "
                f"number of parts; run --shard i/{other[2]}, or wait for that session to finish."
            )

    def release(self) -> None:
        """Remove each lock file this session holds alone, then close it (which releases the flock)."""
        for fd, path, mode in reversed(self._fds):
            alone = mode == fcntl.LOCK_EX or _try_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if alone and _names(path, fd):
                path.unlink(missing_ok=True)
            os.close(fd)
        self._fds = []

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
