"""Tables for notebook 03: the prompt plan per source, the run's manifest, failures by reason, and
what the rows kept beside the answer (reasoning, tool calls: parsed by the engine or left as text)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.generate.store import FailureLog
from kit.params import RunParams
from kit.runfolder import RunFolder, read_json


def plan_table(folder: RunFolder) -> pd.DataFrame:
    """Per source: requested, available, kept, and dropped by reason (from plan.json)."""
    if not folder.plan.exists():
        return pd.DataFrame()
    sources = read_json(folder.plan).get("sources") or []
    keep = ["source", "requested", "available", "kept"]
    frame = pd.DataFrame(sources)
    dropped = [c for c in frame.columns if c.startswith("dropped_") and frame[c].any()]
    return frame[[c for c in keep if c in frame] + dropped]


def failure_table(folder: RunFolder) -> pd.DataFrame:
    records = FailureLog(folder.failures).read()
    counts = Counter((r.get("source"), r.get("reason"), bool(r.get("permanent"))) for r in records)
    return pd.DataFrame(
        [{"source": s, "reason": r, "permanent": p, "requests": n} for (s, r, p), n in sorted(counts.items())]
    )


def manifest_table(folder: RunFolder) -> pd.DataFrame:
    if not folder.manifest.exists():
        return pd.DataFrame([{"field": "manifest", "value": "absent: the run has not finished"}])
    m = read_json(folder.manifest)
    keep = (
        "complete",
        "rows",
        "left",
        "failures",
        "rows_this_session",
        "shards",
        "server_restarts",
        "generating_s",
        "session_started_at",
        "finished_at",
    )
    return pd.DataFrame([{"field": k, "value": str(m.get(k))} for k in keep])


OUTPUT_COLUMNS = ("source", "completion", "reasoning", "tool_calls", "finish_reason")


def _has_text(table: pa.Table, column: str, pattern: str | None = None) -> pa.Array:
    """Per row: the column holds non-blank text (or matches the regex `pattern`); False where absent."""
    if column not in table.column_names:
        return pa.array([False] * len(table))
    values = table[column].cast(pa.string())
    if pattern is not None:
        found = pc.match_substring_regex(values, pattern)
    else:
        found = pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)
    return pc.fill_null(found, False)


def _shard_outputs(path: Path) -> pd.DataFrame | None:
    """Counts per source of one shard (None when it cannot be read); reads five columns only."""
    try:
        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[c for c in OUTPUT_COLUMNS if c in names])
    except (OSError, pa.ArrowException, ValueError):
        return None
    if "source" not in table.column_names:
        return None
    parsed_calls = _has_text(table, "tool_calls")
    counts = {
        "rows": pa.array([True] * len(table)),
        "reasoning (parsed)": _has_text(table, "reasoning"),
        "<think> in text": _has_text(table, "completion", "</?think>"),
        "tool calls (parsed)": parsed_calls,
        "<tool_call> in text": _has_text(table, "completion", "<tool_call>"),
        "no answer": pc.and_(pc.invert(_has_text(table, "completion")), pc.invert(parsed_calls)),
        "cut at max_tokens": pc.fill_null(pc.equal(table["finish_reason"], "length"), False)
        if "finish_reason" in table.column_names
        else pa.array([False] * len(table)),
    }
    frame = pa.table({"source": table["source"], **counts}).to_pandas()
    return frame.groupby("source").sum().astype(int)


def outputs_table(folder: RunFolder) -> tuple[pd.DataFrame, list[str]]:
    """Per source: rows, reasoning split out by the engine or left as `<think>` text, tool calls
    parsed or left as `<tool_call>` text, rows with no answer, rows cut at max_tokens; and the
    names of shards that could not be read."""
    frames, unreadable = [], []
    for path in folder.shard_paths():
        counts = _shard_outputs(path)
        if counts is None:
            unreadable.append(path.name)
        else:
            frames.append(counts)
    if not frames:
        return pd.DataFrame(), unreadable
    return pd.concat(frames).groupby(level=0).sum(), unreadable


def generation_tables(params: RunParams) -> dict[str, pd.DataFrame]:
    """The tables notebook 03 shows, by title (empty ones left out)."""
    folder = RunFolder(Path(params.run_dir))
    outputs, unreadable = outputs_table(folder)
    tables = {
        "Prompt plan": plan_table(folder),
        "Run": manifest_table(folder),
        "What the rows kept (per source)": outputs,
        "Unreadable shards (left out above; stage 4 names them too)": pd.DataFrame({"shard": unreadable}),
        "Failures": failure_table(folder),
    }
    return {k: v for k, v in tables.items() if not v.empty}
