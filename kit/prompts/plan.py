"""The prompt plan: sample each source to its target with a seed, filter, deduplicate, freeze.

    result = build_plan(params.data, model_dir, run.prompts, run.plan)
    result.table            # per source: requested, available, examined, kept, dropped_<reason>

Each source is shuffled with a seed derived from `data.seed` and its name (adding a source does
not change another's sample), then walked in that order: a row a filter drops is replaced by the
next one, until the target is met or the source runs out. Filters, in order: language (where the
source has a language column), malformed (the row does not fit its adapter), duplicate (same
normalised text as a row already kept, across all sources), too_long (more than
`max_prompt_tokens` with the model's tokenizer and chat template) and template_error.

Kept rows do not stay in memory: each source hands them over in batches to a `PromptSpill`, which
splits them into buckets by the first hex digits of the id (ids are sha256 digits, so buckets are
even), holds up to `SPILL_BUFFER_ROWS` as Arrow and, past that, appends them to one parquet file
per bucket in a temporary folder beside `prompts.parquet`. Writing then sorts one bucket at a time,
in id order: the same rows in the same order as sorting everything at once, without holding
everything. Rows with an id of their own (an OpenAI batch line's custom_id, any text) go to as many
buckets again, by a crc32 of the id, written after the others (each sorted): the order is fixed,
sorted within each part. An id on two rows (two sources' custom_ids) stops the plan, naming both.
A source's dataset, and its ids, are let go once it is walked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.errors import DataError
from kit.params import DataParams
from kit.prompts import sources as _sources  # noqa: F401  (fills the adapter registry)
from kit.prompts.adapters import get_adapter
from kit.prompts.dedup import Deduplicator
from kit.prompts.origin import source_origin
from kit.prompts.records import PlanReport, PromptRecord, SourceOrigin
from kit.prompts.sampling import REASONS, SourcePlan, load_source, source_targets
from kit.prompts.tokens import POOL_MIN, TokenCounter
from kit.runfolder import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

PROMPTS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("source", pa.string()),
        ("source_row_id", pa.string()),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("tools", pa.string()),
        ("metadata", pa.string()),
        ("prompt_tokens", pa.int64()),
    ]
)
"""Columns of `prompts.parquet` (tools and prompt_tokens may be null); a row: `PromptRecord`."""

SPILL_BUFFER_ROWS = 32768
"""Kept rows held in memory (as Arrow, split into buckets) before they are appended to the bucket
files; a plan that fits is sorted and written from memory."""
BUCKET_DIGITS = 2
"""Spilled rows go to 16 ** BUCKET_DIGITS buckets by the id's first hex digits: 256, so a bucket
of a 2M-prompt plan is ~8K rows."""
ROWS_PER_GROUP = 65536
"""Rows per row group of `prompts.parquet`, at least (consecutive buckets joined)."""
DROPPED_COLUMNS = ["source", "source_row_id", "reason", "detail"]


@dataclass
class PlanResult:
    """What `build_plan` wrote, with the per-source table and every dropped row."""

    table: pd.DataFrame
    prompts: Path
    plan: Path
    kept: int
    dropped: int
    dropped_rows: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    warnings: list[str] = field(default_factory=list)
    """Sources that gave fewer prompts than planned, with the filter responsible (also in plan.json)."""


def build_plan(
    data: DataParams,
    tokenizer_dir: Path | None,
    out_prompts: Path,
    out_plan: Path,
    progress: bool = True,
    pool_min: int | None = POOL_MIN,
) -> PlanResult:
    """Load, sample, filter and deduplicate every source; write `prompts.parquet` and `plan.json`.

    Token counting moves to worker processes for batches of at least `pool_min` prompts (None: never).
    """
    _check_sources(data)
    if data.max_prompt_tokens and tokenizer_dir is None:
        raise DataError(
            "data.max_prompt_tokens needs the model's tokenizer to count prompt tokens: "
            "pass the model directory (model.path), or drop max_prompt_tokens."
        )
    counter = TokenCounter(tokenizer_dir, pool_min=pool_min) if tokenizer_dir is not None else None
    with PromptSpill(Path(out_prompts)) as spill:
        try:
            plans, origins, warnings = _run_sources(data, counter, progress, spill)
        finally:
            if counter is not None:
                counter.close()
        kept, ids_sha256 = spill.write()
    dropped = _dropped_rows(plans)
    write_json_atomic(out_plan, _plan_json(data, tokenizer_dir, plans, kept, ids_sha256, origins, warnings))
    summary = pd.DataFrame([p.summary() for p in plans])
    return PlanResult(
        summary,
        out_prompts,
        out_plan,
        kept=kept,
        dropped=len(dropped),
        dropped_rows=dropped,
        warnings=warnings,
    )


def _run_sources(
    data: DataParams, counter: TokenCounter | None, progress: bool, spill: PromptSpill
) -> tuple[list[SourcePlan], dict[str, SourceOrigin], list[str]]:
    """Plan every source, its kept rows to `spill`; a source left empty is a `DataError`, one left
    short a warning. Each source's dataset is let go once it is walked. Also each source's origin
    (kit.prompts.origin: Hub commit, or files and their sha256)."""
    dedup = Deduplicator() if data.dedup else None
    targets = source_targets(data)
    plans: list[SourcePlan] = []
    origins: dict[str, SourceOrigin] = {}
    warnings: list[str] = []
    for source in data.sources:
        dataset = load_source(source, progress)
        origins[source.name] = source_origin(source, dataset)
        plan = SourcePlan(source, dataset, targets[source.name], data, counter, dedup, sink=spill.add)
        del dataset
        plans.append(plan.run(progress=progress))
        plan.release()
        short = shortfall(plan) or bad_lines(plan)
        if short and plan.kept_count == 0:
            raise DataError(short)
        if short:  # said where it matters: stage 3's outcome and the report's index (plan.json's warnings)
            log.info(short)
            warnings.append(short)
    return plans, origins, warnings


def _dropped_rows(plans: list[SourcePlan]) -> pd.DataFrame:
    """Every dropped row of every source, in plan order."""
    columns: dict[str, list[str]] = {name: [] for name in DROPPED_COLUMNS}
    for p in plans:
        columns["source"] += [p.source.name] * len(p.dropped)
        columns["source_row_id"] += p.dropped.source_row_ids
        columns["reason"] += p.dropped.reasons
        columns["detail"] += p.dropped.details
    return pd.DataFrame(columns if columns["source"] else [], columns=DROPPED_COLUMNS)


class PromptSpill:
    """Kept rows on their way to `prompts.parquet`, split into buckets by the id's first hex digits
    as they come: in memory up to `SPILL_BUFFER_ROWS`, then appended to one parquet file per bucket
    in a temporary folder beside the output (removed on leaving the `with`, also on error). `add`
    takes batches of rows as `SourcePlan` keeps them; `write` writes them all sorted by id.
    """

    def __init__(self, out: Path) -> None:
        self.out = out
        self.folder: Path | None = None
        self.digits = BUCKET_DIGITS
        self._prefixes = pa.array([f"{b:0{self.digits}x}" for b in range(16**self.digits)])
        self.buckets = 2 * len(self._prefixes)
        """Hash ids' buckets by prefix, then as many for ids of their own, by crc32."""
        self._parts: dict[int, list[pa.Table]] = {}
        """Rows not spilled yet, per bucket, in the order they came."""
        self._buffered = 0
        self._writers: dict[int, pq.ParquetWriter] = {}

    def __enter__(self) -> PromptSpill:
        # a plan killed mid-way (kill -9, out of memory) left its spill; the run's lock says no
        # other plan is writing beside this output now
        for stale in self.out.parent.glob(f".{self.out.name}.*.spill"):
            shutil.rmtree(stale, ignore_errors=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, rows: list[PromptRecord]) -> None:
        """Take a batch of kept rows (`PROMPTS_SCHEMA`'s columns)."""
        table = pa.Table.from_pylist(rows, schema=PROMPTS_SCHEMA)
        prefix = pc.utf8_slice_codeunits(table.column("id"), 0, self.digits)
        bucket = pc.index_in(prefix, value_set=self._prefixes)
        own = pc.invert(pc.match_substring_regex(table.column("id"), "^[0-9a-f]{16}$"))
        buckets = bucket.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        if pc.any(own).as_py():  # ids of their own: a bucket by crc32, after the hash ids' buckets
            at = np.flatnonzero(own.to_numpy(zero_copy_only=False))
            ids = table.column("id").take(pa.array(at)).to_pylist()
            half = len(self._prefixes)
            buckets[at] = [half + zlib.crc32(i.encode()) % half for i in ids]
        table = table.take(np.argsort(buckets, kind="stable"))  # stable: a bucket keeps the order
        start = 0
        for b, n in enumerate(np.bincount(buckets, minlength=self.buckets).tolist()):
            if n:
                self._parts.setdefault(b, []).append(table.slice(start, n))
                start += n
        self._buffered += len(rows)
        if self._buffered >= SPILL_BUFFER_ROWS:
            self._spill()

    def _spill(self) -> None:
        """Append the rows held to their buckets' files."""
        if self.folder is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.folder = Path(
                tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".spill", dir=self.out.parent)
            )
        for b, parts in sorted(self._parts.items()):
            if b not in self._writers:  # statistics: of no use here, and they pile up in memory
                self._writers[b] = pq.ParquetWriter(
                    self._path(b), PROMPTS_SCHEMA, compression="zstd", write_statistics=False
                )
            self._writers[b].write_table(pa.concat_tables(parts))
        self._parts, self._buffered = {}, 0

    def _path(self, bucket: int) -> Path:
        assert self.folder is not None
        return self.folder / f"{bucket:0{self.digits}x}.parquet"

    def write(self) -> tuple[int, str]:
        """Write every row taken, sorted by id, to the output atomically; return the row count and
        the sha256 of the ids joined by newlines (plan.json's `ids_sha256`)."""
        digest, count = hashlib.sha256(), 0
        with (
            atomic_path(self.out) as tmp,
            pq.ParquetWriter(tmp, PROMPTS_SCHEMA, compression="zstd") as writer,
        ):
            for group in self._row_groups():
                ids = "\n".join(group.column("id").to_pylist())
                digest.update((f"\n{ids}" if count else ids).encode())
                count += group.num_rows
                writer.write_table(group)
        return count, digest.hexdigest()

    def _row_groups(self) -> Iterator[pa.Table]:
        """All rows sorted by id: the buckets in order, each read (its file, then the rows still
        held) and sorted, joined into groups of at least `ROWS_PER_GROUP` rows but the last (one
        group when nothing was spilled)."""
        for writer in self._writers.values():
            writer.close()
        group: list[pa.Table] = []
        for b in range(self.buckets):
            parts = [pq.read_table(self._path(b))] if b in self._writers else []
            parts += self._parts.pop(b, [])
            if not parts:
                continue
            group.append(_unique_ids(_sort_by_id(pa.concat_tables(parts))))
            if sum(t.num_rows for t in group) >= ROWS_PER_GROUP:
                yield pa.concat_tables(group)
                group = []
        if group:
            yield pa.concat_tables(group)

    def close(self) -> None:
        """Close the bucket files and remove the temporary folder."""
        for writer in self._writers.values():
            try:
                writer.close()  # a no-op when closed already
            except (OSError, pa.ArrowException):  # on the way out after an error: the folder goes anyway
                pass
        self._writers.clear()
        self._parts, self._buffered = {}, 0
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


def _sort_by_id(table: pa.Table) -> pa.Table:
    return table.take(pc.sort_indices(table, [("id", "ascending")]))


def _unique_ids(table: pa.Table) -> pa.Table:
    """`table` (sorted by id) when no id is on two rows; else `DataError` naming both (their source and
    line): one id means one answer, and a row's own id (a custom_id) is never renamed."""
    ids = table.column("id")
    if table.num_rows < 2:
        return table
    same = pc.equal(ids.slice(1), ids.slice(0, table.num_rows - 1))
    if not pc.any(same).as_py():
        return table
    at = int(np.flatnonzero(same.to_numpy(zero_copy_only=False))[0])
    a, b = table.slice(at, 2).to_pylist()

    def where(row: PromptRecord) -> str:
        line = json.loads(row["metadata"] or "{}").get("line") if row["metadata"] else None
        return f"source '{row['source']}'" + (f" {line}" if line else f" row {row['source_row_id']}")

    raise DataError(
        f"the id {a['id']!r} is on two prompts, {where(a)} and {where(b)}: every request needs its own id "
        "(an OpenAI batch line's custom_id is its row's id, also across files and sources). To fix: give "
        "one of them another custom_id, or remove the repeat."
    )


FILTER_FIXES = {
    "language": "lower the count, set `language` to a value seen, or remove it",
    "malformed": "check that the adapter fits this dataset",
    "duplicate": "lower the count (the source holds fewer distinct prompts) or set data.dedup: false",
    "too_long": "raise data.max_prompt_tokens",
    "template_error": "check the model's chat template against these messages",
}


def shortfall(plan: SourcePlan) -> str | None:
    """What left a source with fewer prompts than planned (each filter, the values it saw) and
    what to do; None when it met its target (or had none and kept something)."""
    row, target = plan.summary(), plan.target
    if plan.kept_count >= (target if target is not None else 1):
        return None
    wanted = f"{target}" if target is not None else "all its"
    parts = [f"source '{row['source']}' gave {plan.kept_count} of {wanted} planned prompts"]
    drops = {r: row[f"dropped_{r}"] for r in REASONS if row[f"dropped_{r}"]}
    if plan.language_column is not None and drops.get("language"):
        seen = ", ".join(f"{v!r} ({n})" for v, n in plan.languages_seen.most_common(8))
        parts.append(
            f"the language filter `language: {plan.source.language}` dropped {drops['language']} rows: "
            f"column '{plan.language_column}' holds {seen}"
        )
    parts += [f"filter {r} dropped {n} rows" for r, n in drops.items() if r != "language"]
    if plan.examined >= row["available"]:
        parts.append(f"all {row['available']} rows of the dataset were examined")
    fixes = [FILTER_FIXES[r] for r in drops] or ["lower the count, or add rows to the dataset"]
    return "; ".join(parts) + ". To fix: " + "; ".join(fixes) + "."


def bad_lines(plan: SourcePlan) -> str | None:
    """The lines of a file-of-lines source (an OpenAI batch file) dropped as malformed, named, or None:
    each is left out and every other line kept."""
    bad = plan.dropped.counts["malformed"]
    if not plan.adapter.lines or not bad:
        return None
    shown = "; ".join(detail for _, detail in plan.dropped.first["malformed"])
    return (
        f"source '{plan.source.name}': {bad} line(s) of its file cannot be sent and are left out, the "
        f"other {plan.kept_count} kept: {shown}"
        + (" ..." if bad > len(plan.dropped.first["malformed"]) else "")
        + ". To fix: correct those lines (kit export --format openai_batch answers them with an error)"
    )


def _check_sources(data: DataParams) -> None:
    if not data.sources:
        raise DataError(
            "data.sources is empty: list at least one source (name, adapter, dataset) in the params."
        )
    for source in data.sources:
        get_adapter(source.adapter)  # an unknown name fails before any dataset is loaded
    names = [s.name for s in data.sources]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise DataError(f"data.sources: names must be unique, repeated: {', '.join(repeated)}")


def read_prompts(path: Path) -> pa.Table:
    """Read a frozen prompt set; `DataError` when it is missing or not one."""
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise DataError(f"{path} not found: build the prompt plan first (kit generate writes it).") from None
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(
            f"{path} is not a readable parquet file ({e}); delete it and rebuild the plan."
        ) from None
    missing = [n for n in PROMPTS_SCHEMA.names if n not in table.column_names]
    if missing:
        raise DataError(f"{path} lacks columns {', '.join(missing)}: it is not a prompt plan; rebuild it.")
    return table


def take_prompts(path: Path, positions: list[int]) -> pa.Table:
    """The rows of a frozen prompt set at `positions` (0-based, in that order), reading only the row
    groups that hold them: a sample of a 2M-prompt set costs its own rows, not the set."""
    try:
        file = pq.ParquetFile(path)
    except (FileNotFoundError, pa.ArrowInvalid, OSError):
        read_prompts(path)  # raises the DataError saying what is wrong and what to do
        raise
    sizes = [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)]
    starts = np.cumsum([0, *sizes])
    pos = np.asarray(positions, dtype=np.int64)
    if len(pos) and (pos.min() < 0 or pos.max() >= starts[-1]):
        raise IndexError(f"positions outside the {starts[-1]} prompts of {path}")
    group_of = np.searchsorted(starts, pos, side="right") - 1
    groups = np.unique(group_of).tolist()
    table = file.read_row_groups(groups, columns=PROMPTS_SCHEMA.names)
    read_at = dict(zip(groups, np.cumsum([0, *[sizes[g] for g in groups]]).tolist(), strict=False))
    local = [read_at[g] + int(p - starts[g]) for p, g in zip(pos.tolist(), group_of.tolist(), strict=True)]
    return table.take(pa.array(local, pa.int64()))


def tools_list(row: PromptRecord) -> list[dict[str, Any]] | None:
    """A planned prompt's `tools` column (JSON text) parsed for the engine's client: None for a prompt
    without tools (no column value, or "[]")."""
    tools = row.get("tools")
    return (json.loads(tools) or None) if tools else None


def _plan_json(
    data: DataParams,
    tokenizer_dir: Path | None,
    plans: list[SourcePlan],
    prompts: int,
    ids_sha256: str,
    origins: dict[str, SourceOrigin],
    warnings: list[str],
) -> PlanReport:
    return PlanReport(
        seed=data.seed,
        total=data.total,
        max_prompt_tokens=data.max_prompt_tokens,
        dedup=data.dedup,
        tokenizer=str(tokenizer_dir) if tokenizer_dir else None,
        prompts=prompts,
        ids_sha256=ids_sha256,
        sources=[p.summary() for p in plans],
        dropped_examples={p.source.name: p.examples() for p in plans},
        origins=origins,
        warnings=warnings,
    )
