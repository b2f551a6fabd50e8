"""Where generated rows land: atomic parquet shards, the failure log, and what is already done.

A row is written once, inside one shard that appears by atomic rename; a crash loses at most
the rows buffered since the last flush, and those are simply generated again on resume. So
the union of the shards holds every finished id exactly once.

Shards are encoded, written and fsynced by one writer thread, in order, while the event loop goes
on sending requests; a shard that fails to write raises in the loop at the next flush, never
silently. The failure log is buffered and written in batches.

Resume verifies what it trusts: each shard's size and CRC-32 are recorded at write time in a
hidden sidecar (`.part-NNNNN.parquet.crc32`) and checked before its ids are counted; a shard
without one (written by an older kit, or copied without its hidden file) is read in full, with
parquet's page checksums, and its columns checked against the row schema (the footer has no page
checksum). A shard that fails is moved to `corrupt/`, one that repeats ids of another to
`duplicate/`, each with a warning, and their rows are generated again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.generate.work_item import FailureRecord, GeneratedRow, LoggedFailure
from kit.runfolder import ShardFiles, atomic_path, write_text_atomic

log = logging.getLogger(__name__)

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
ROW_SCHEMA_VERSION = 2
"""Part of the run's identity: rows of two schemas never share a run folder. 2 added
`reasoning`, `tool_calls` and `reasoning_tokens` (readers take their absence as null)."""
ROW_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("prompt_id", pa.string()),
        ("sample_index", pa.int32()),
        ("source", pa.string()),
        ("messages", pa.list_(MESSAGE)),
        ("tools", pa.string()),
        ("completion", pa.string()),
        ("reasoning", pa.string()),
        ("tool_calls", pa.string()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("reasoning_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("accept_length", pa.float64()),
        ("engine", pa.string()),
        ("sampling", pa.string()),
        ("sampling_hash", pa.string()),
        ("finished_at", pa.timestamp("ms", tz="UTC")),
    ]
)


def row_bytes(row: GeneratedRow) -> int:
    """About the bytes a row's text takes (characters of completion, reasoning and messages)."""
    messages = row.get("messages") or ()
    return (
        len(row.get("completion") or "")
        + len(row.get("reasoning") or "")
        + sum(len(m.get("content") or "") for m in messages if isinstance(m, dict))
    )


def shard_rows_for(shard_rows: int | None, total: int) -> int:
    """Rows per shard: as set, else 1,000, or one shard per 0.5% of a large run's rows (at most
    20,000), so 2M rows make 200 shards, not 2,000."""
    if shard_rows is not None:
        return shard_rows
    return int(min(max(1000, total // 200), 20_000))


def row_id(prompt_id: str, sample_index: int) -> str:
    """The id of one generated row: the prompt's id, suffixed by the sample index beyond the first."""
    return prompt_id if sample_index == 0 else f"{prompt_id}.{sample_index}"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class ShardWriter:
    """Buffers rows and writes them as `part-[TAG-]NNNNN.parquet`, each shard atomically.

    `flush_async` hands the buffer to the writer thread and returns at once (it waits only when
    `max_pending` shards are already queued: a disk slower than the rows slows the loop down
    instead of growing memory); `flush` writes the rest and waits for every shard in flight.
    """

    directory: Path
    tag: str = ""
    buffer: list[GeneratedRow] = field(default_factory=list)
    last_flush: float = field(default_factory=time.monotonic)
    max_pending: int = 2
    buffer_bytes: int = 0
    """Characters of text in the buffered rows (completion, reasoning, messages): a shard's size."""

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files = ShardFiles(self.directory)
        for stale in self._files.stale_temporaries(self.tag):
            stale.unlink(missing_ok=True)
        self._seq = max((self._files.seq_of(p, self.tag) for p in self._files.parts()), default=0)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kit-shards")
        self._jobs: deque[Future[Path | None]] = deque()

    def add(self, row: GeneratedRow) -> None:
        self.buffer.append(row)
        self.buffer_bytes += row_bytes(row)

    def due(self, max_rows: int, max_seconds: float, max_bytes: float = float("inf")) -> bool:
        """Whether the buffered rows make a shard: enough rows, enough text, or time elapsed."""
        if not self.buffer:
            return False
        return (
            len(self.buffer) >= max_rows
            or self.buffer_bytes >= max_bytes
            or time.monotonic() - self.last_flush >= max_seconds
        )

    def submit(self, *then: Callable[[], object]) -> Future[Path | None]:
        """Queue the buffered rows as the next shard, then `then` (e.g. saving the timeline), in the
        writer thread; return the job, whose result is the shard's path (None for no rows)."""
        self.last_flush = time.monotonic()
        rows, self.buffer, self.buffer_bytes = self.buffer, [], 0
        target = None
        if rows:
            self._seq += 1
            target = self._files.part(self.tag, self._seq)
        job = self._thread.submit(self._write, rows, target, then)
        self._jobs.append(job)
        return job

    async def flush_async(self, *then: Callable[[], object]) -> None:
        """Queue a shard without blocking the event loop; raise if an earlier shard failed to write."""
        self.submit(*then)
        while len(self._jobs) > self.max_pending:
            # shield: a cancelled wait must not cancel a queued shard (its rows would vanish)
            await asyncio.shield(asyncio.wrap_future(self._jobs[0]))
            self._reap()
        self._reap()

    def flush(self, *then: Callable[[], object]) -> Path | None:
        """Write the buffered rows as one new shard and wait for every shard in flight.

        Returns the new shard's path (None when nothing was buffered); raises the first failed write.
        """
        job = self.submit(*then)
        while self._jobs:
            self._jobs.popleft().result()
        return job.result()

    def close(self) -> None:
        """Write what is buffered, wait for it, and let the writer thread go."""
        self.flush()
        self._thread.shutdown()

    def _reap(self) -> None:
        while self._jobs and self._jobs[0].done():
            self._jobs.popleft().result()  # raises the error of a failed write

    def _write(self, rows: list[GeneratedRow], target: Path | None, then: tuple) -> Path | None:
        if target is not None:
            table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
            with atomic_path(target) as tmp:
                pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
                # the checksum lands before the shard: a visible shard always has its own
                write_text_atomic(ShardFiles.checksum(target), checksum_of(tmp.read_bytes()))
        for step in then:
            step()
        return target


def checksum_of(data: bytes) -> str:
    return f"{len(data)} {zlib.crc32(data):08x}\n"


@dataclass
class ShardCheck:
    """What resume found in the shards: the ids it can trust (as Arrow arrays: 2M ids take ~40 MB,
    not the ~400 MB of Python strings in a set), and the shards it set aside."""

    id_chunks: list[pa.Array] = field(default_factory=list)
    by_source: dict[str, int] = field(default_factory=dict)
    """Rows per source in the trusted shards (read with the ids, no second pass)."""
    corrupt: list[str] = field(default_factory=list)
    duplicate: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(len(c) for c in self.id_chunks)

    def id_array(self) -> pa.ChunkedArray:
        return pa.chunked_array(self.id_chunks, type=pa.string())

    @property
    def ids(self) -> set[str]:
        """Every trusted id as a Python set (for a small run; `holds` asks about a few)."""
        return set(self.id_array().to_pylist())

    def with_ids(self, extra: Iterable[str]) -> pa.ChunkedArray:
        """The trusted ids and `extra` (e.g. ids the engine refuses for good), for skipping."""
        return pa.chunked_array([*self.id_chunks, pa.array(sorted(extra), type=pa.string())], pa.string())

    def holds(self, ids: Iterable[str]) -> set[str]:
        """Those of `ids` that are done."""
        wanted = pa.array(list(ids), type=pa.string())
        if not len(wanted) or not self.id_chunks:
            return set()
        found = pc.is_in(wanted, value_set=pa.concat_arrays([c.cast(pa.string()) for c in self.id_chunks]))
        return set(wanted.filter(found).to_pylist())


ID_COLUMNS = ["id", "source"]
REPEATS = "repeats ids of another shard (a copy?); its rows count once"


def _shard_ids(path: Path) -> pa.Table:
    """The ids and sources of a verified shard; ValueError when it fails its checksum or cannot be
    read in full."""
    data = path.read_bytes()
    sidecar = ShardFiles.checksum(path)
    if sidecar.exists():
        if sidecar.read_text() != checksum_of(data):
            raise ValueError("its size or CRC-32 differs from the one recorded when it was written")
        return pq.read_table(pa.BufferReader(data), columns=ID_COLUMNS)
    # no record of the file: every page against its own checksum, and the footer (which no page
    # checksum covers) against the row schema: one flipped bit there renames or retypes a column
    table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
    if not table.schema.equals(ROW_SCHEMA):
        theirs = {f.name: str(f.type) for f in table.schema}
        wrong = [f.name for f in ROW_SCHEMA if theirs.get(f.name) != str(f.type)]
        wrong += [name for name in theirs if ROW_SCHEMA.get_field_index(name) < 0]
        raise ValueError(f"its columns differ from the row schema's ({', '.join(wrong[:4])})")
    return table.select(ID_COLUMNS)


def _set_aside(path: Path, aside: Path, why: str) -> None:
    aside.mkdir(exist_ok=True)
    path.rename(aside / path.name)
    sidecar = ShardFiles.checksum(path)
    if sidecar.exists():
        sidecar.rename(aside / sidecar.name)
    log.warning("%s: %s; moved to %s/", path, why, aside)


def done_ids(directory: Path, verify: bool = True) -> ShardCheck:
    """Ids already written in the shards, each shard verified first (`verify`).

    A shard that fails verification is moved to `corrupt/`, one that repeats ids of a shard read
    before it (a copied shard) or within itself to `duplicate/`: their rows are generated again,
    never lost or doubled. Ids stay Arrow arrays; repeats across shards are found by counting.
    """
    check = ShardCheck()
    # the kit's own names first, so that of an original and its copy, the copy is set aside
    files = ShardFiles(directory)
    read: list[tuple[Path, pa.Array, dict[str, int]]] = []
    for path in sorted(files.parts(), key=lambda p: (not files.kit_named(p), p.name)):
        try:
            table = _shard_ids(path) if verify else pq.read_table(path, columns=ID_COLUMNS)
        except (pa.ArrowException, OSError, ValueError) as e:
            _set_aside(path, files.corrupt, f"corrupt shard ({e}); its rows will be generated again")
            check.corrupt.append(path.name)
            continue
        ids = table.column("id").combine_chunks()
        if pc.count_distinct(ids).as_py() < len(ids):
            _set_aside(path, files.duplicate, REPEATS)
            check.duplicate.append(path.name)
            continue
        sources = {e["values"]: e["counts"] for e in pc.value_counts(table.column("source")).to_pylist()}
        read.append((path, ids, sources))
    repeating = _repeating_shards([ids for _, ids, _ in read])
    for i, (path, ids, sources) in enumerate(read):
        if i in repeating:
            _set_aside(path, files.duplicate, REPEATS)
            check.duplicate.append(path.name)
            continue
        check.id_chunks.append(ids)
        for source, n in sources.items():
            check.by_source[source] = check.by_source.get(source, 0) + n
    return check


def _repeating_shards(ids: list[pa.Array]) -> set[int]:
    """Shards (by position) holding an id that a shard before them, itself kept, holds too.

    One count of distinct ids over all shards answers the usual case (none repeats); only then
    are the repeated ids listed and the shards holding them walked in order.
    """
    every = pa.chunked_array(ids, type=pa.string())
    if len(ids) < 2 or pc.count_distinct(every).as_py() == len(every):
        return set()
    counts = pc.value_counts(every)
    repeated = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    kept: set[str] = set()
    out = set()
    for i, shard_ids in enumerate(ids):
        mine = set(shard_ids.filter(pc.is_in(shard_ids, value_set=repeated)).to_pylist())
        if mine & kept:
            out.add(i)
        else:
            kept |= mine
    return out


class FailureLog:
    """Append-only `failures.jsonl`: one JSON object per failed request.

    Records are buffered and written in batches (by `flush`, which the shard writer's thread calls
    after each shard, and once `batch` records wait): a crash may lose the last few, which are
    then simply tried again on resume.
    """

    def __init__(self, path: Path, batch: int = 1000) -> None:
        self.path = path
        self.batch = batch
        self._pending: list[bytes] = []
        self._lock = threading.Lock()

    def append(self, record: FailureRecord) -> None:
        logged: LoggedFailure = {**record, "at": now_utc().isoformat()}
        try:
            line = orjson.dumps(logged, default=str, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:  # e.g. a lone surrogate in an error text
            line = (json.dumps(logged, default=str) + "\n").encode()
        self._pending.append(line)
        if len(self._pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        """Write the buffered records (safe from any thread)."""
        with self._lock:
            lines, self._pending = self._pending, []
            if lines:
                with open(self.path, "ab") as f:
                    f.write(b"".join(lines))

    def read(self) -> list[LoggedFailure]:
        """Every readable record (as written: read, not checked); a line cut short by a crash is skipped."""
        self.flush()
        if not self.path.exists():
            return []
        out: list[LoggedFailure] = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def permanent_ids(self) -> set[str]:
        """Ids the server rejected (bad request, context overflow): not retried on resume."""
        return {r["id"] for r in self.read() if r.get("permanent")}
