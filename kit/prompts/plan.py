"""The prompt plan: sample each source to its target with a seed, filter, deduplicate, freeze.

    result = build_plan(params.data, model_dir, run.prompts, run.plan)
    result.table            # per source: requested, available, examined, kept, dropped_<reason>

Each source is shuffled with a seed derived from `data.seed` and its name (adding a source does
not change another's sample), then walked in that order: a row a filter drops is replaced by the
next one, until the target is met or the source runs out. Filters, in order: language (where the
source has a language column), malformed (the row does not fit its adapter), duplicate (same
normalised text as a row already kept, across all sources), too_long (more than
`max_prompt_tokens` with the model's tokenizer and chat template) and template_error.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.errors import DataError
from kit.params import DataParams
from kit.prompts import sources as _sources  # noqa: F401  (fills the adapter registry)
from kit.prompts.adapters import get_adapter
from kit.prompts.dedup import Deduplicator
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
"""Columns of `prompts.parquet` (tools and prompt_tokens may be null)."""


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
    try:
        plans, table, warnings = _run_sources(data, counter, progress)
    finally:
        if counter is not None:
            counter.close()
    table = write_prompts(table, out_prompts)
    dropped = pd.DataFrame(
        [d for p in plans for d in p.dropped], columns=["source", "source_row_id", "reason", "detail"]
    )
    write_json_atomic(out_plan, {**_plan_json(data, tokenizer_dir, plans, table), "warnings": warnings})
    summary = pd.DataFrame([p.summary() for p in plans])
    return PlanResult(
        summary,
        out_prompts,
        out_plan,
        kept=table.num_rows,
        dropped=len(dropped),
        dropped_rows=dropped,
        warnings=warnings,
    )


def _run_sources(
    data: DataParams, counter: TokenCounter | None, progress: bool
) -> tuple[list[SourcePlan], pa.Table, list[str]]:
    """Plan every source; a source left empty is a `DataError`, one left short a warning."""
    dedup = Deduplicator() if data.dedup else None
    targets = source_targets(data)
    plans, tables, warnings = [], [], []
    for source in data.sources:
        plan = SourcePlan(source, load_source(source, progress), targets[source.name], data, counter, dedup)
        plans.append(plan.run(progress=progress))
        short = shortfall(plan)
        if short and plan.kept_count == 0:
            raise DataError(short)
        if short:
            log.warning(short)
            warnings.append(short)
        tables.append(pa.Table.from_pylist(plan.kept, schema=PROMPTS_SCHEMA))
        plan.kept.clear()  # the Arrow copy is several times smaller than the Python rows
    return plans, pa.concat_tables(tables), warnings


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


def write_prompts(table: pa.Table, out: Path) -> pa.Table:
    """Write the kept rows sorted by id, atomically; return the sorted table."""
    table = table.take(pc.sort_indices(table, [("id", "ascending")]))
    with atomic_path(Path(out)) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return table


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


def _plan_json(
    data: DataParams, tokenizer_dir: Path | None, plans: list[SourcePlan], table: pa.Table
) -> dict[str, Any]:
    ids = "\n".join(table.column("id").to_pylist()).encode()
    return {
        "seed": data.seed,
        "total": data.total,
        "max_prompt_tokens": data.max_prompt_tokens,
        "dedup": data.dedup,
        "tokenizer": str(tokenizer_dir) if tokenizer_dir else None,
        "prompts": table.num_rows,
        "ids_sha256": hashlib.sha256(ids).hexdigest(),
        "sources": [p.summary() for p in plans],
        "dropped_examples": {p.source.name: p.examples() for p in plans},
    }
