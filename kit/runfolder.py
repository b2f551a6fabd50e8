"""The run folder `outputs/<run>/`: where each artifact lives, atomic writes into it, and the four
stage artifacts read and written as their types (kit.artifacts: `read_decision()`, `write_summary()`).

Every file is written to a temporary name in the same folder and renamed into place, so a
reader (or a resumed run) sees either the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from kit.artifacts import Decision, Manifest, ProbeReport, Record, Summary
from kit.errors import DISK_FULL, RunFolderError, disk_full_message

R = TypeVar("R", bound=Record)


@contextmanager
def atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to `target`; on success rename it over `target`. The file gets the
    mode any file the user writes gets (0666 less the umask): mkstemp makes it 0600, which left
    reports and results unreadable to a colleague or a web server."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def current_umask() -> int:
    """The process's umask, read from /proc where Linux gives it (setting it to read it back, the
    only other way, would race with other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


def read_artifact(path: Path, kind: type[R], *, lenient: bool = False) -> R | None:
    """The artifact `kind` (kit.artifacts) in `path`, or None when the file is absent. A file that is
    not a JSON object is an error naming it, or (`lenient`: a page that says what is missing) None."""
    if not path.exists():
        return None
    try:
        data = read_json(path)
        if not isinstance(data, dict):
            raise RunFolderError(f"{path} holds no JSON object; delete it and rerun the stage")
    except (RunFolderError, OSError, ValueError):
        if lenient:
            return None
        raise
    return kind.from_json(data)


def required(record: R | None, path: Path) -> R:
    """`record` as read from `path`; an error naming the file when it is absent."""
    if record is None:
        raise RunFolderError(f"{path} not found: run the stage that writes it first")
    return record


def write_artifact(path: Path, record: Record) -> None:
    write_json_atomic(path, record.to_json())


SHARD_NAME = re.compile(r"part-(?:(?P<tag>s\d+of\d+|b\d+a\d+)-)?(?P<seq>\d+)\.parquet$")
"""A shard the kit wrote: `part-NNNNN.parquet`, `part-s<i>of<N>-NNNNN.parquet` for `--shard i/N`,
or `part-b<block>a<actor>-NNNNN.parquet` for one block of a Ray job as one actor wrote it."""


def stamp() -> str:
    """A UTC time for file names (archive folders, files set aside): 20261129T230800."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")


def unreadable_copy(path: Path) -> Path:
    """Where a file that cannot be read is set aside: `<name>.unreadable-<time>` beside it."""
    return path.with_name(f"{path.name}.unreadable-{stamp()}")


@dataclass(frozen=True)
class ShardFiles:
    """The parquet shards in `generations/`: their names, checksum sidecars, and where a shard that
    fails verification (`corrupt/`) or repeats another's ids (`duplicate/`) is set aside."""

    directory: Path

    def part(self, tag: str, seq: int) -> Path:
        """Shard number `seq` of the session tagged `tag` ('' for a whole run)."""
        return self.directory / f"part-{tag + '-' if tag else ''}{seq:05d}.parquet"

    def parts(self) -> list[Path]:
        """Every shard, kit-named or copied in, sorted by name."""
        return sorted(self.directory.glob("part-*.parquet"))

    @staticmethod
    def seq_of(part: Path, tag: str) -> int:
        """The sequence number of a shard of session `tag` (0 for another session's, or a foreign name)."""
        m = SHARD_NAME.match(part.name)
        return int(m["seq"]) if m and (m["tag"] or "") == tag else 0

    @staticmethod
    def kit_named(part: Path) -> bool:
        return SHARD_NAME.match(part.name) is not None

    @staticmethod
    def checksum(part: Path) -> Path:
        """The hidden sidecar that records a shard's size and CRC-32."""
        return part.with_name(f".{part.name}.crc32")

    def stale_temporaries(self, tag: str) -> list[Path]:
        """Temporary files (of shards and of their checksums) a killed writer of session `tag` left;
        other sessions' are left alone: they may be writing them right now."""
        mine = f"part-{tag}-*.tmp" if tag else "part-[0-9]*.tmp"
        return [p for pattern in (f".{mine}", f"..{mine}") for p in self.directory.glob(pattern)]

    @property
    def corrupt(self) -> Path:
        return self.directory / "corrupt"

    @property
    def duplicate(self) -> Path:
        return self.directory / "duplicate"


@dataclass(frozen=True)
class ShardView:
    """The files of one `kit generate` session: the whole run (tag '') or a static shard (`--shard i/N`,
    tag `s<i>of<N>`), so that shards of one plan write side by side into one run folder."""

    folder: RunFolder
    tag: str = ""
    directory: Path | None = None
    """Where its files are: the run folder's root unless set (a Ray actor's are under `ray/`)."""

    def _tagged(self, stem: str, suffix: str) -> Path:
        root = self.directory or self.folder.root
        return root / (f"{stem}-{self.tag}{suffix}" if self.tag else f"{stem}{suffix}")

    @property
    def about(self) -> Path:
        """What a Ray actor says of itself: host, pid, capacity, its server's log."""
        return self._tagged("actor", ".json")

    @property
    def manifest(self) -> Path:
        return self._tagged("manifest", ".json")

    def read_manifest(self, *, lenient: bool = False) -> Manifest | None:
        """This session's manifest, or None before it finished (see `read_artifact`)."""
        return read_artifact(self.manifest, Manifest, lenient=lenient)

    def write_manifest(self, manifest: Manifest) -> None:
        write_artifact(self.manifest, manifest)

    @property
    def metrics(self) -> Path:
        return self._tagged("metrics", ".parquet")

    @property
    def metrics_log(self) -> Path:
        """The running session's timeline samples, appended (folded into `metrics` at its end)."""
        return self._tagged("metrics", ".jsonl")

    @property
    def lock(self) -> Path:
        return self._tagged(".generate", ".lock")


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run's artifacts: the one place their names are made (docs/run-folder.md)."""

    root: Path

    def ensure(self) -> RunFolder:
        """Create the folder and its subfolders; a path in the way that is a file is a clear error."""
        for d in (self.root, self.logs, self.figures, self.generations):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except (NotADirectoryError, FileExistsError):
                blocker = next((p for p in (d, *d.parents) if p.exists() and not p.is_dir()), d)
                raise RunFolderError(
                    f"cannot make the run folder {self.root}: {blocker} is a file, not a folder. Point "
                    "output_dir (or the run name) elsewhere, or move that file away."
                ) from None
        return self

    @property
    def params(self) -> Path:
        return self.root / "params.yaml"

    def earlier_params(self) -> list[Path]:
        """Earlier, different params of this run, kept as `params.<n>.yaml`."""
        return sorted(self.root.glob("params.*.yaml"))

    def earlier_params_copy(self, n: int) -> Path:
        return self.root / f"params.{n}.yaml"

    @property
    def probe(self) -> Path:
        return self.root / "probe.json"

    def read_probe(self, *, lenient: bool = False) -> ProbeReport | None:
        """probe.json, or None before stage 1 ran (see `read_artifact`)."""
        return read_artifact(self.probe, ProbeReport, lenient=lenient)

    def write_probe(self, report: ProbeReport) -> None:
        write_artifact(self.probe, report)

    @property
    def decision(self) -> Path:
        return self.root / "decision.json"

    def read_decision(self, *, lenient: bool = False) -> Decision | None:
        """decision.json, or None before stage 2 ran (see `read_artifact`)."""
        return read_artifact(self.decision, Decision, lenient=lenient)

    def write_decision(self, decision: Decision) -> None:
        write_artifact(self.decision, decision)

    @property
    def sweep(self) -> Path:
        return self.root / "sweep.parquet"

    @property
    def sweep_answers(self) -> Path:
        """Stage 2's answer lengths per prompt (plain arm): what stage 3's longest-first order
        predicts from before the run has made rows of its own."""
        return self.root / "sweep_answers.parquet"

    @property
    def sweep_runs(self) -> Path:
        return self.root / "sweep_runs.parquet"

    @property
    def sweep_backends(self) -> Path:
        """Stage 2's settings sweep (`decide.backends`, kit.decide.checks.settings_sweep): every
        measurement."""
        return self.root / "sweep_backends.parquet"

    @property
    def sweep_journal(self) -> Path:
        """Stage 2's measurements as they finish, while its sweep runs: a stopped sweep goes on from
        them (kit.decide.measure.journal); gone once decision.json is written."""
        return self.root / "sweep_journal.jsonl"

    @property
    def step_profile(self) -> Path:
        """Stage 2 on a CPU: the step-time profile its prediction is calibrated on."""
        return self.root / "step_profile.parquet"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts.parquet"

    @property
    def prompts_stamp(self) -> Path:
        """The hash of the data params `prompts.parquet` was planned from."""
        return self.root / "prompts.hash"

    @property
    def plan(self) -> Path:
        return self.root / "plan.json"

    @property
    def generations(self) -> Path:
        return self.root / "generations"

    @property
    def shards(self) -> ShardFiles:
        return ShardFiles(self.generations)

    def shard_paths(self) -> list[Path]:
        return self.shards.parts()

    @property
    def identity(self) -> Path:
        """What the rows of this run were made with (model, engine, sampling, plan): `_run.json`."""
        return self.generations / "_run.json"

    @property
    def failures(self) -> Path:
        return self.root / "failures.jsonl"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    def read_manifest(self, *, lenient: bool = False) -> Manifest | None:
        """The whole run's manifest.json, or None before a session finished (see `read_artifact`)."""
        return self.shard().read_manifest(lenient=lenient)

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.parquet"

    @property
    def metrics_log(self) -> Path:
        return self.shard().metrics_log

    def shard(self, index: int = 0, count: int = 1) -> ShardView:
        """The files of session `--shard index/count` (the whole run when count is 1)."""
        return ShardView(self, f"s{index}of{count}" if count > 1 else "")

    @property
    def lock(self) -> Path:
        """Held by the `kit generate` writing here (shared by `--shard` sessions)."""
        return self.shard().lock

    def shard_locks(self) -> list[Path]:
        """The lock files of `--shard` sessions."""
        return sorted(self.root.glob(".generate-*.lock"))

    def generation_outputs(self) -> list[Path]:
        """Stage 3's outputs present now (every session's): what `--fresh` archives."""
        parts = [self.generations, self.failures, self.prompts, self.plan, self.prompts_stamp]
        parts += [self.manifest, *self.root.glob("manifest-*.json")]
        parts += [self.metrics, *self.root.glob("metrics-*.parquet"), *self.root.glob("metrics*.jsonl")]
        parts += [self.ray_actors]
        return [p for p in parts if p.exists()]

    @property
    def ray_actors(self) -> Path:
        """A Ray job's per-actor files: where each actor runs and its own timeline."""
        return self.root / "ray"

    def ray_actor(self, index: int) -> ShardView:
        """The files of Ray actor `index`: `ray/actor-a<N>.json` (its host, pid, capacity, server
        log) and its timeline `ray/metrics-a<N>.parquet` (samples appended to `.jsonl` meanwhile)."""
        return ShardView(self, f"a{index}", self.ray_actors)

    @property
    def archive(self) -> Path:
        """Earlier outputs set aside by `--fresh`, one `<time>/` folder each."""
        return self.root / "archive"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def read_summary(self, *, lenient: bool = False) -> Summary | None:
        """summary.json, or None before stage 4 ran (see `read_artifact`)."""
        return read_artifact(self.summary, Summary, lenient=lenient)

    def write_summary(self, summary: Summary) -> None:
        write_artifact(self.summary, summary)

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    def figure(self, stem: str) -> Path:
        return self.figures / f"{stem}.png"

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    def notebook(self, name: str) -> Path:
        """The executed copy of stage notebook `name` (e.g. 01_probe_environment)."""
        return self.notebooks / f"{name}.ipynb"

    def notebook_paths(self) -> list[Path]:
        return sorted(self.notebooks.glob("*.ipynb"))

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def report_index(self) -> Path:
        return self.report / "index.html"

    def report_page(self, name: str) -> Path:
        """The HTML page of executed notebook `name`."""
        return self.report / f"{name}.html"

    @property
    def comparisons(self) -> Path:
        """`kit compare`'s figures, by default in the second run's folder."""
        return self.root / "compare"

    @property
    def dataset(self) -> Path:
        """Notebook 04's export of the run as training data (kit.export; `kit export` takes any --to)."""
        return self.root / "dataset"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


@contextmanager
def disk_full_is_a_message(root: Path) -> Iterator[None]:
    """Turn "no space left on device" (or a quota) inside the block into one RunFolderError."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        raise RunFolderError(disk_full_message(e, root)) from None
