"""Read a run folder as far as it can be read: every missing or corrupt part becomes a named gap.

Each loader returns `(data, gaps)`; `gaps` is a list of one-line strings a person can act on.
Nothing here raises on a damaged run: stage 4 must say what it could not read, not stop.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kit.analyse.reasoning import nullable_int
from kit.generate.metrics import merge_samples, read_log
from kit.runfolder import RunFolder

GENERATION_COLUMNS: dict[str, Any] = {
    "id": "",
    "source": "unknown",
    "messages": None,
    "tools": None,
    "completion": "",
    "reasoning": None,
    "tool_calls": None,
    "finish_reason": "unknown",
    "prompt_tokens": pd.NA,
    "completion_tokens": pd.NA,
    "reasoning_tokens": pd.NA,
    "latency_s": float("nan"),
    "ttft_s": float("nan"),
    "engine": None,
    "sampling": None,
    "sampling_hash": None,
    "sample_index": 0,
    "finished_at": pd.NaT,
    "accept_length": float("nan"),
}
"""Columns stage 4 reads, with the value used where a shard lacks one."""

REQUIRED = ("id", "source", "completion", "finish_reason", "completion_tokens")
KEPT_OUTPUTS = ("reasoning", "tool_calls")
"""Columns a shard written before the kit kept reasoning and parsed tool calls lacks."""
TEXT_OR_NULL = ("tools", "reasoning", "tool_calls")


def unreadable_gap(path: Path, e: Exception) -> str:
    """The gap of a parquet file that cannot be read (its first line of error)."""
    why = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
    return f"{path.parent.name}/{path.name}: unreadable ({why}); its rows are left out"


def _read_shard(path: Path) -> tuple[pa.Table | None, str | None]:
    try:
        return pq.read_table(path), None
    except (OSError, pa.ArrowException, ValueError) as e:
        return None, unreadable_gap(path, e)


def _concat(tables: list[pa.Table]) -> pd.DataFrame:
    frames = [t.to_pandas() for t in tables]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _text_or_none(value: Any) -> str | None:
    """A JSON-or-text cell as str, or None: nulls and NaN become None, lists and dicts JSON text."""
    if isinstance(value, str):
        return value
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "tolist"):
        value = value.tolist()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def normalise_rows(df: pd.DataFrame, gaps: list[str]) -> pd.DataFrame:
    """Rows as stage 4 reads them: every column of GENERATION_COLUMNS present (a missing required
    one is a gap), text cells str or None, numbers numeric, `finished_at` a UTC time."""
    for col, default in GENERATION_COLUMNS.items():
        if col not in df.columns:
            if col in REQUIRED and len(df):
                gaps.append(f"generations: column '{col}' missing; filled with {default!r}")
            df[col] = default
    df["completion"] = df["completion"].fillna("").astype(str)
    df["source"] = df["source"].fillna("unknown").astype(str)
    df["finish_reason"] = df["finish_reason"].fillna("unknown").astype(str)
    for col in TEXT_OR_NULL:
        df[col] = pd.Series([_text_or_none(v) for v in df[col].tolist()], index=df.index, dtype=object)
    for col in ("prompt_tokens", "completion_tokens", "latency_s", "ttft_s", "accept_length"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["reasoning_tokens"] = nullable_int(df["reasoning_tokens"])
    df["finished_at"] = pd.to_datetime(df["finished_at"], errors="coerce", utc=True)
    return df


def load_generations(folder: RunFolder) -> tuple[pd.DataFrame, list[str]]:
    """All readable generation shards as one DataFrame, text included, plus the gaps (missing or
    corrupt shards). Every row in memory: for a small run or a slice; stage 4 reads a run with
    kit.analyse.scan, which keeps each row's facts only."""
    gaps: list[str] = []
    paths = folder.shard_paths()
    if not paths:
        gaps.append(f"no generation shards in {folder.generations}: run stage 3 (generate) first")
    tables = []
    for path in paths:
        table, gap = _read_shard(path)
        if gap:
            gaps.append(gap)
        elif table is not None:
            tables.append(table)
    old = [t for t in tables if len(t) and not set(KEPT_OUTPUTS) <= set(t.schema.names)]
    gaps += older_schema_gap(sum(len(t) for t in old), len(old))
    return once_per_id(normalise_rows(_concat(tables), gaps), gaps), gaps


def once_per_id(df: pd.DataFrame, gaps: list[str]) -> pd.DataFrame:
    """Each row id counted once: shards that repeat ids (a copied shard, a resume racing a copy)
    would count rows twice against the plan; the first shard's row is kept and the gap says so."""
    if df.empty or "id" not in df.columns:
        return df
    repeated = df["id"].duplicated(keep="first")
    if repeated.any():
        gaps.append(
            f"generations: {int(repeated.sum())} row(s) repeat the id of a row in another shard (a copied "
            "shard?); each id is counted once. `kit generate` sets such shards aside in "
            "generations/duplicate/"
        )
        df = df[~repeated].reset_index(drop=True)
    return df


def older_schema_gap(rows: int, shards: int) -> list[str]:
    """A gap naming the rows of shards written before `reasoning` / `tool_calls` were kept."""
    if not rows:
        return []
    return [
        f"generations: {rows} row(s) in {shards} shard(s) written without the {' / '.join(KEPT_OUTPUTS)} "
        "columns (an older kit): their reasoning and parsed tool calls count as absent; "
        "<think> and <tool_call> text left in the completion is still analysed"
    ]


def load_failures(folder: RunFolder) -> tuple[pd.DataFrame, list[str]]:
    """`failures.jsonl` as a DataFrame (id, source, reason, error, attempts, at); bad lines are gaps."""
    cols = ["id", "source", "reason", "error", "attempts", "at"]
    if not folder.failures.exists():
        return pd.DataFrame(columns=cols), [f"{folder.failures.name} missing: failures are unknown"]
    rows, bad = [], 0
    for line in folder.failures.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        rows.append(obj if isinstance(obj, dict) else {"error": str(obj)})
    gaps = [f"{folder.failures.name}: {bad} line(s) are not JSON and are left out"] if bad else []
    df = pd.DataFrame(rows).reindex(columns=list(dict.fromkeys(cols + [c for r in rows for c in r])))
    df["reason"] = df["reason"].fillna("unknown").astype(str)
    df["source"] = df["source"].fillna("unknown").astype(str)
    return df, gaps


def load_metrics(folder: RunFolder) -> tuple[pd.DataFrame | None, list[str]]:
    """The throughput timeline: `metrics.parquet` plus the samples a running (or crashed) session
    has appended to its log; None with a gap when there is none or it is unreadable."""
    log = read_log(folder.metrics_log)
    if not folder.metrics.exists() and log.empty:
        return None, [f"{folder.metrics.name} missing: throughput over time is derived from the rows"]
    frames, gaps = [log] if len(log) else [], []
    if folder.metrics.exists():
        table, gap = _read_shard(folder.metrics)
        if table is None:
            gaps = [str(gap).replace("its rows are left out", "throughput is derived from the rows")]
        else:
            frames.insert(0, table.to_pandas())
    frames = [f for f in frames if len(f)]
    if not frames:
        return None, gaps
    df = merge_samples(frames)
    if "t_s" not in df.columns:
        return None, [f"{folder.metrics.name}: no 't_s' column; throughput is derived from the rows"]
    return _continuous_time(df).sort_values("t_s").reset_index(drop=True), gaps


def _continuous_time(df: pd.DataFrame) -> pd.DataFrame:
    """A resumed run restarts `t_s` at 0 per session; rebase it on the wall clock (`at`) when present."""
    if "at" not in df.columns:
        return df
    at = pd.to_datetime(df["at"], errors="coerce", utc=True)
    if at.isna().any():
        return df
    return df.assign(t_s=(at - at.min()).dt.total_seconds())


def load_json_part(path: Path, what: str) -> tuple[dict[str, Any] | None, list[str]]:
    """A JSON file of the run folder, or None with a gap saying what is missing or corrupt."""
    if not path.exists():
        return None, [f"{path.name} missing: {what}"]
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return None, [f"{path.name} is not valid JSON ({e}): {what}"]
    if not isinstance(data, dict):
        return None, [f"{path.name}: expected an object, got {type(data).__name__}"]
    return data, []


def load_prompt_counts(folder: RunFolder) -> tuple[dict[str, int], list[str]]:
    """Prompts per source from `prompts.parquet` (the frozen prompt set), for when plan.json is absent."""
    if not folder.prompts.exists():
        return {}, [f"{folder.prompts.name} missing: requested counts come from plan.json only"]
    try:
        src = pq.read_table(folder.prompts, columns=["source"]).column("source").to_pandas()
    except (OSError, pa.ArrowException, ValueError, KeyError) as e:
        return {}, [f"{folder.prompts.name}: unreadable ({str(e)[:120]})"]
    return {str(k): int(v) for k, v in src.value_counts().items()}, []


def outstanding_failures(failures: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """The last failure record of each id that has no generated row (a retry that later succeeded,
    or a second record of the same id after a resume, is not a failure of the run)."""
    if failures.empty or "id" not in failures.columns:
        return failures
    last = failures.drop_duplicates(subset="id", keep="last")
    return last[~last["id"].isin(set(df["id"]))].reset_index(drop=True)
