"""`kit export RUN --to DIR`: a run folder as a dataset folder that `datasets.load_dataset(DIR)`
opens and `huggingface_hub` pushes as it is.

    result = export_run(Path("outputs/demo"), ExportOptions(to=Path("/tmp/demo-data")))

Two passes over the shards: the first decides each row's drop reason (kit.export.drops) from
stage 4's judgement of each batch, keeping one byte a row in memory (kit.export.facts: the dedups
run on digests spilled to disk, a partition at a time), or, for the near-duplicate rules, stage 4's
whole scan with its clusters (kit.analyse.read_run: memory grows with the rows); then the shards
are read again batch by batch and each row is written, in the format asked (kit.export.rows), to
`data/train-*` or
`data/rejected-*`, a new file every `max_file_bytes` of Arrow data (500 MB: the Hub's advice for
parquet files). Memory holds those codes and one batch.
Everything is written into a hidden folder beside DIR and renamed into place at the end, so an
error (or Ctrl-C) leaves DIR as it was; an existing DIR is replaced only with `overwrite`.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.analyse.run import RunData, read_run
from kit.decide.views.verdict import decision_answer
from kit.errors import ExportError
from kit.export import card as cards
from kit.export.drops import DEFAULT_DROP, NEAR_RULES, drop_reasons
from kit.export.facts import SKIP_CODE, ExportFacts, export_facts, facts_from_run, failure_samples
from kit.export.openai_batch import write_batch_output
from kit.export.result import ExportResult
from kit.export.rows import Format, Reasoning, convert, export_schema
from kit.params import AnalyseParams, RunParams, saved_params
from kit.progress import progress as progress_bar
from kit.prompts.origin import source_origin
from kit.prompts.records import PlanReport, SourceOrigin
from kit.runfolder import RunFolder
from kit.version import version_text

MAX_FILE_BYTES = 500 * 2**20
SPLITS = ("train", "rejected")
BATCH_ROWS = 1024
ROW_GROUP_ROWS = 4096
ROW_GROUP_BYTES = 16 * 2**20
"""A split's rows are written in row groups of about this many rows (or Arrow bytes)."""
SKIP = "\0skip"
"""The reason of a shard row left out (its id repeats a row of another shard): not exported."""
DATA = "data"
CARD = "README.md"


@dataclass(frozen=True)
class ExportOptions:
    """What `kit export` was asked for."""

    to: Path
    drop: tuple[str, ...] = DEFAULT_DROP
    fmt: Format | Literal["openai_batch"] = "messages"
    reasoning: Reasoning = "field"
    allow_incomplete: bool = False
    overwrite: bool = False
    max_file_bytes: int = MAX_FILE_BYTES


class SplitWriter:
    """One split's rows as `data/<split>-NNNNN-of-MMMMM.parquet`, a new file once `max_bytes` of
    Arrow data went into the current one. An empty split gets no file (and the card no entry for
    it): `datasets` cannot load a split of no rows. Rows are held until `ROW_GROUP_ROWS` (or
    `ROW_GROUP_BYTES`) of them make a row group: a batch's few rejected rows written as a row group
    of their own made 2,000 row groups in a 2M-row run's `rejected` file, whose metadata the writer
    keeps until the file closes (RSS grew ~35 bytes a row written)."""

    def __init__(self, root: Path, split: str, schema: pa.Schema, max_bytes: int) -> None:
        self.root, self.split, self.schema, self.max_bytes = root, split, schema, max_bytes
        self.paths: list[Path] = []
        self.rows = 0
        self.nbytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._in_file = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0

    def write(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        self.rows += table.num_rows
        self.nbytes += table.nbytes
        full = self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES
        if full or self._in_file + self._pending_bytes >= self.max_bytes:  # the file's limit as before
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._writer is None or self._in_file >= self.max_bytes:
            self._open()
        assert self._writer is not None
        table = pa.concat_tables(self._pending)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self._in_file += self._pending_bytes
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def _open(self) -> None:
        if self._writer is not None:
            self._writer.close()
        path = self.root / DATA / f"{self.split}-{len(self.paths):05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self.paths.append(path)
        self._in_file = 0

    def close(self) -> list[Path]:
        """Close the last file and name every file `-NNNNN-of-MMMMM` (the Hub's split naming)."""
        self._flush()
        if self._writer is None:
            return []
        self._writer.close()
        n = len(self.paths)
        named = [p.with_name(f"{self.split}-{i:05d}-of-{n:05d}.parquet") for i, p in enumerate(self.paths)]
        for old, new in zip(self.paths, named, strict=True):
            old.rename(new)
        self.paths = named
        return named


def check_target(to: Path, run: Path, overwrite: bool) -> None:
    """Refuse an output folder that holds something (unless `overwrite`), a file, or the run itself."""
    to, run = to.resolve(), run.resolve()
    if to == run or to in run.parents:
        raise ExportError(f"--to {to} is the run folder {run} or holds it: export into another folder")
    if to.exists() and not to.is_dir():
        raise ExportError(f"--to {to} is a file: name a folder")
    if to.is_dir() and any(to.iterdir()) and not overwrite:
        raise ExportError(
            f"--to {to} exists and is not empty: name a new folder, or pass --overwrite to replace it "
            "(it is replaced only once the export has succeeded)"
        )


@contextmanager
def staged(to: Path) -> Iterator[Path]:
    """A hidden folder beside `to` to write into; renamed to `to` on success (an earlier `to` moved
    aside first and removed after), removed on any error."""
    to = to.resolve()
    to.parent.mkdir(parents=True, exist_ok=True)
    tmp = to.parent / f".{to.name}.export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = to.parent / f".{to.name}.replaced-{os.getpid()}"
    if to.exists():
        to.rename(old)
    tmp.rename(to)
    shutil.rmtree(old, ignore_errors=True)


def run_state(folder: RunFolder) -> tuple[bool, str]:
    """(complete, why not) of a run: its manifest says complete, and no rows are left."""
    if not folder.root.is_dir():
        raise ExportError(f"{folder.root} is not a run folder: pass outputs/<run> of a generated run")
    if not folder.shard_paths():
        raise ExportError(
            f"{folder.root} holds no generated rows ({folder.generations} has no shards): "
            "run `kit generate PARAMS` first"
        )
    manifest = folder.read_manifest(lenient=True)
    if manifest is None:
        return False, "it has no manifest.json (stage 3 did not finish, or is still running)"
    if not manifest.complete:
        return False, f"manifest.json says incomplete: {manifest.left} row(s) left to generate"
    return True, ""


def _looked(params: RunParams | None) -> bool:
    """Whether stage 4 looked for near-duplicates under these params."""
    return (params.analyse if params is not None else AnalyseParams()).near_duplicates


def analyse_params(params: RunParams | None, drop: tuple[str, ...]) -> AnalyseParams:
    """Stage 4's params of the run; near-duplicates looked for when a drop rule needs them."""
    analyse = params.analyse if params is not None else AnalyseParams()
    if any(r in NEAR_RULES for r in drop) and not analyse.near_duplicates:
        analyse = analyse.model_copy(update={"near_duplicates": True})
    return analyse


def export_run(
    run_dir: Path, options: ExportOptions, progress: bool = True, data: RunData | None = None
) -> ExportResult:
    """Export a run folder (see the module's docstring); `ExportError` says what is in the way.

    `data`: the run as stage 4 read it (notebook 04's `analysis.data`), so the shards' facts are not
    read again; read here when None or when it lacks the near-duplicate clusters a drop rule needs."""
    folder = RunFolder(Path(run_dir))
    complete, why = run_state(folder)
    if not complete and not options.allow_incomplete:
        raise ExportError(
            f"{folder.root} is incomplete: {why}. Rerun `kit generate` on its params to finish it, or "
            "pass --allow-incomplete to export the rows that are there (the card will say so)"
        )
    check_target(options.to, folder.root, options.overwrite)
    params = saved_params(folder.params)
    needs_near = any(r in NEAR_RULES for r in options.drop)
    if data is None and not needs_near:  # flat memory: a one-byte code a row (kit.export.facts)
        facts = export_facts(folder, analyse_params(params, options.drop), options.drop, progress)
    else:
        if data is None or needs_near and (not _looked(params) or "answer_cluster" not in data.df.columns):
            data = read_run(folder, analyse_params(params, options.drop), progress)
        facts = facts_from_run(data, drop_reasons(data.df, data.flags, options.drop), options.drop)
        del data
    with staged(options.to) as tmp:
        if options.fmt == "openai_batch":
            result = write_batch_output(folder, facts, params, tmp, progress)
        else:
            result = write_splits(folder, facts, options, tmp, progress)
            result.complete = complete
            result.card = tmp / CARD
            result.card.write_text(
                str(cards.dataset_card(card_facts(folder, facts, params, result, options)))
            )
    final = options.to.resolve()
    result.folder = final
    result.files = [final / p.relative_to(tmp) for p in result.files]
    result.card = final / CARD if result.card else None
    result.complete = complete
    return result


def write_splits(
    folder: RunFolder, facts: ExportFacts, options: ExportOptions, root: Path, progress: bool
) -> ExportResult:
    """Every row into `train` or `rejected`; failed requests into `rejected` when `failed` drops."""
    fmt = options.fmt if options.fmt != "openai_batch" else "messages"
    schema = export_schema(fmt, options.reasoning)
    writers = {s: SplitWriter(root, s, schema, options.max_file_bytes) for s in SPLITS}
    by_source: dict[str, Counter[str]] = {}
    labels = facts.labels()
    labels[SKIP_CODE] = SKIP
    bar = progress_bar(total=facts.exported(), desc="export", unit="row", disable=not progress)
    with bar:
        for rows, codes in facts.coded_batches():
            why = labels[codes].tolist()
            _write_batch(rows, why, writers, fmt, options.reasoning, by_source)
            bar.update(sum(1 for w in why if w != SKIP))
        if "failed" in options.drop:
            for rows in failed_rows(folder, facts.failures):
                _write_batch(rows, ["failed"] * len(rows), writers, fmt, options.reasoning, by_source)
    files = [p for w in writers.values() for p in w.close()]
    counts = facts.counts()
    counts["failed"] = sum(c["failed"] for c in by_source.values())
    return ExportResult(
        folder=root,
        splits={s: w.rows for s, w in writers.items()},
        reasons={r: int(counts.get(r, 0)) for r in options.drop},
        files=files,
        complete=True,
        sources=_source_counts(facts, by_source),
    )


def _write_batch(
    rows: list[dict[str, Any]],
    why: list[str | None],
    writers: dict[str, SplitWriter],
    fmt: Format,
    reasoning: Reasoning,
    by_source: dict[str, Counter[str]],
) -> None:
    kept = [(r, w) for r, w in zip(rows, why, strict=True) if w != SKIP]
    for split in SPLITS:
        part = [(r, w) for r, w in kept if (w is None) == (split == "train")]
        if part:
            writers[split].write(convert([r for r, _ in part], [w for _, w in part], fmt, reasoning))
    for r, w in kept:
        c = by_source.setdefault(str(r.get("source")), Counter())
        c["train" if w is None else "rejected"] += 1
        if w == "failed":
            c["failed"] += 1


def failed_rows(folder: RunFolder, failures: pd.DataFrame) -> Iterator[list[dict[str, Any]]]:
    """Requests that failed for good (no row), as rows without a completion: their prompts from
    prompts.parquet, a batch at a time."""
    if failures.empty or "id" not in failures.columns or not folder.prompts.exists():
        return
    wanted: dict[str, list[tuple[str, int]]] = {}
    for fid, (pid, index) in zip(failures["id"].astype(str), failure_samples(failures), strict=True):
        wanted.setdefault(pid, []).append((fid, index))
    columns = ["id", "source", "messages", "tools", "prompt_tokens"]
    pf = pq.ParquetFile(folder.prompts)
    keys = pa.array(list(wanted))
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, columns=columns):
        table = pa.Table.from_batches([batch])
        table = table.filter(pc.is_in(table.column("id"), value_set=keys))
        rows = []
        for prompt in table.to_pylist():
            for fid, index in wanted[prompt["id"]]:
                rows.append({**prompt, "id": fid, "prompt_id": prompt["id"], "sample_index": index})
        if rows:
            yield rows


def _source_counts(
    facts: ExportFacts, by_source: dict[str, Counter[str]]
) -> dict[str, dict[str, int | None]]:
    planned: dict[str, int | None] = {}
    for entry in (facts.plan or {}).get("sources") or []:
        if isinstance(entry, dict) and entry.get("source"):
            planned[str(entry["source"])] = entry.get("kept")
    planned = planned or {k: v for k, v in facts.prompt_counts.items()}
    generated = facts.sources
    failed = facts.failures["source"].astype(str).value_counts().to_dict() if len(facts.failures) else {}
    names = sorted(set(planned) | set(generated) | set(by_source) | set(failed))
    return {
        s: {
            "planned": planned.get(s),
            "generated": int(generated.get(s, 0)),
            "failed": int(failed.get(s, 0)),
            "train": by_source.get(s, Counter())["train"],
            "rejected": by_source.get(s, Counter())["rejected"],
        }
        for s in names
    }


def engine_packages(engine_env: dict[str, Any]) -> dict[str, str]:
    """The engine environment's package versions (probe.json's `engine_env.interpreter.packages`)."""
    interpreter = engine_env.get("interpreter")
    packages = interpreter.get("packages") if isinstance(interpreter, dict) else None
    return {k: v for k, v in packages.items() if v} if isinstance(packages, dict) else {}


def card_facts(
    folder: RunFolder,
    facts: ExportFacts,
    params: RunParams | None,
    result: ExportResult,
    options: ExportOptions,
) -> cards.CardFacts:
    """What the card states, from the run folder and what the export wrote."""
    manifest = facts.manifest
    decision = folder.read_decision(lenient=True)
    answer = decision_answer(decision) if decision is not None else None
    probe = folder.read_probe(lenient=True)
    packages = engine_packages(probe.engine_env if probe is not None else {})
    engine = dict(manifest.engine) if manifest is not None else {}
    engine["versions"] = packages
    sampling = dict(manifest.sampling) if manifest is not None and manifest.sampling else {}
    if not sampling and params is not None:
        sampling = params.generate.sampling.model_dump(mode="json", exclude_defaults=False)
    schema = export_schema(options.fmt if options.fmt != "openai_batch" else "messages", options.reasoning)
    origins, origins_note = source_origins(facts.plan, params)
    return cards.CardFacts(
        run=folder.root.name,
        schema=schema,
        splits=result.splits,
        split_bytes={s: sum(p.stat().st_size for p in result.files if p.name.startswith(s)) for s in SPLITS},
        files_bytes=sum(p.stat().st_size for p in result.files),
        drop_rules=options.drop,
        reasons=result.reasons,
        sources=result.sources,
        fmt=str(options.fmt),
        reasoning=options.reasoning,
        complete=result.complete,
        params=params,
        manifest=manifest,
        decision=decision,
        decision_text=f"{answer.headline}. {answer.detail}" if answer else None,
        engine=engine,
        sampling=sampling,
        gaps=list(facts.gaps),
        origins=origins,
        origins_note=origins_note,
        kept_flags=dict(facts.kept_flags),
        near_found=near_found(folder, facts.kept_flags),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        kit_version=version_text(),
    )


def near_found(folder: RunFolder, kept_flags: dict[str, int | None]) -> dict[str, dict[str, int]]:
    """Stage 4's near-duplicate clusters (summary.json) for each near rule the export did not count."""
    summary = folder.read_summary(lenient=True)
    entry = summary.near_duplicates if summary is not None else None
    if not isinstance(entry, dict):
        return {}
    kinds = {"near_duplicate": "answers", "near_duplicate_prompt": "prompts"}
    return {
        rule: dict(entry[kind])
        for rule, kind in kinds.items()
        if kept_flags.get(rule, 0) is None and isinstance(entry.get(kind), dict)
    }


def source_origins(plan: PlanReport | None, params: RunParams | None) -> tuple[dict[str, SourceOrigin], str]:
    """(each source's origin, how it was found): plan.json's `origins`, recorded when the sources
    were loaded; for a plan made before they were, from the saved params now (files hashed now)."""
    recorded = (plan or {}).get("origins")
    if isinstance(recorded, dict) and recorded:
        return recorded, ""
    if params is None:
        return {}, ""
    now = {s.name: source_origin(s) for s in params.data.sources}
    return now, "read at export: this run's plan.json does not record them, so a file may have changed since"
