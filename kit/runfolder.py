"""The run folder `outputs/<run>/`: where each artifact lives, and atomic writes into it.

Every file is written to a temporary name in the same folder and renamed into place, so a
reader (or a resumed run) sees either the old file or the new one, never half of one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import RunFolderError


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success rename it over `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(target: Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def write_json_atomic(target: Path, data: Any) -> None:
    write_text_atomic(target, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path} not found: run the stage that writes it first") from None
    except json.JSONDecodeError as e:
        raise RunFolderError(f"{path} is not valid JSON ({e}); delete it and rerun the stage") from None


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run's artifacts (see DESIGN.md, 'Run folder')."""

    root: Path

    def ensure(self) -> RunFolder:
        for d in (self.root, self.logs, self.figures, self.generations):
            d.mkdir(parents=True, exist_ok=True)
        return self

    @property
    def params(self) -> Path:
        return self.root / "params.yaml"

    @property
    def probe(self) -> Path:
        return self.root / "probe.json"

    @property
    def decision(self) -> Path:
        return self.root / "decision.json"

    @property
    def sweep(self) -> Path:
        return self.root / "sweep.parquet"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts.parquet"

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def generations(self) -> Path:
        return self.root / "generations"

    @property
    def failures(self) -> Path:
        return self.root / "failures.jsonl"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.parquet"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def shard_paths(self) -> list[Path]:
        return sorted(self.generations.glob("part-*.parquet"))


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def disk_full_is_a_message(root: Path) -> Iterator[None]:
    """Turn "no space left on device" (or a quota) inside the block into one RunFolderError."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        raise RunFolderError(disk_full_message(e, root)) from None


def disk_full_message(e: OSError, root: Path) -> str:
    where = e.filename or f"in {root}"
    try:
        free = f"{shutil.disk_usage(root).free / 2**20:.0f} MiB free now"
    except OSError:
        free = "free space unknown"
    return (
        f"the disk is full ({os.strerror(e.errno or errno.ENOSPC)}, writing {where}; {free}). Rows "
        "written before are kept: free some space (or move the run with output_dir) and rerun the same "
        "command to resume."
    )
