"""Tables for notebook 03: the prompt plan per source, the run's manifest, failures by reason, and
what the rows kept beside the answer (reasoning, tool calls: parsed by the engine or left as text)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kit.artifacts import Manifest
from kit.decide.choose.decision import speculation_label
from kit.decide.forecast.check import forecast_check
from kit.decide.views.verdict import measured_level
from kit.display import Table, hours, seconds, table, text, timestamp
from kit.generate.metrics import load_timeline
from kit.generate.store import FailureLog
from kit.generate.verdict import (
    FAILURE_REASONS,
    failure_answer,
    failures_by_reason,
    generation_answer,
    plan_warnings,
    throughput_answer,
)
from kit.params import saved_params
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


RUN_FIELDS = {
    "complete": "complete",
    "rows": "rows generated",
    "left": "rows left",
    "failures": "failed requests",
    "rows_this_session": "rows this session",
    "shards": "parquet shards",
    "server_restarts": "server restarts",
    "generating_s": "time generating",
    "session_started_at": "session started",
    "finished_at": "finished",
}


def run_table(folder: RunFolder) -> Table:
    """The manifest's fields a reader needs, named and in units."""
    m = folder.read_manifest()
    if m is None:
        frame = pd.DataFrame([{"field": "manifest", "value": "absent: the run has not finished"}])
        return table(frame, "Run")
    shown = {
        "generating_s": seconds,
        "session_started_at": timestamp,
        "finished_at": timestamp,
    }
    rows = [{"field": name, "value": shown.get(k, text)(getattr(m, k))} for k, name in RUN_FIELDS.items()]
    return table(pd.DataFrame(rows), "Run")


def _output_tokens(folder: RunFolder) -> int | None:
    """Completion tokens over every readable shard (None when there are none)."""
    total = None
    for path in folder.shard_paths():
        try:
            column = pq.read_table(path, columns=["completion_tokens"]).column(0)
        except (OSError, pa.ArrowException, KeyError, ValueError):
            continue
        total = (total or 0) + int(pc.sum(column).as_py() or 0)
    return total


def _baseline(folder: RunFolder) -> str | None:
    """What stage 2 measured for the arm the run used, beside the run's own tokens/s."""
    name = speculation_label(saved_params(folder.params))
    level = measured_level(folder.read_decision(lenient=True), name)
    return f"stage 2 measured {level}" if level else None


def generation_verdict(folder: RunFolder) -> str:
    """Notebook 03's opening, as Markdown: rows against plan, completeness, failures, throughput."""
    manifest = folder.read_manifest()
    answers = (
        generation_answer(folder, manifest),
        failure_answer(failures_by_reason(folder, None)),
        throughput_answer(None, manifest, _output_tokens(folder), _baseline(folder)),
    )
    head = f"## Outcome: {answers[0].headline}, " + (
        "complete" if manifest is not None and manifest.complete else "not complete"
    )
    lines = [f"- **{a.topic}: {a.headline}.** {a.detail}" for a in answers]
    lines += [f"- **Plan:** {w}" for w in plan_warnings(folder)]
    lines += [f"- **Time:** {t}" for t in (_time_left(folder, manifest) or _judged(folder, manifest),) if t]
    return "\n".join([head, "", *lines])


def _time_left(folder: RunFolder, manifest: Manifest | None) -> str | None:
    """While a run is going (or stopped part way): the time left in tokens, from the timeline's
    newest sample (kit.generate.eta)."""
    if manifest is not None and manifest.complete:
        return None
    timeline = load_timeline(folder.metrics, folder.metrics_log)
    if "eta_s" not in timeline or not timeline["eta_s"].notna().any():
        return None
    last = timeline[timeline["eta_s"].notna()].iloc[-1]
    at = (
        pd.Timestamp(last["at"]).strftime("%H:%M:%S UTC")
        if "at" in last and pd.notna(last["at"])
        else "the last sample"
    )
    return (
        f"about {hours(float(last['eta_s']))} left at {at}: {int(last['tokens_left']):,} output tokens "
        f"predicted still to make at {float(last['tok_s'] or 0):,.0f} tok/s "
        "(rerun this cell to follow a run that is going)"
    )


def _judged(folder: RunFolder, manifest: Manifest | None) -> str | None:
    """For a complete run: stage 2's forecast against what it took (kit.decide.forecast.check)."""
    check = forecast_check(folder.read_decision(lenient=True), manifest, _output_tokens(folder) or 0, None)
    return f"{check.sentence[0].upper()}{check.sentence[1:]}." if check is not None else None


def generation_tables(folder: RunFolder) -> list[Table]:
    """The tables notebook 03 shows, for reading (empty ones left out)."""
    outputs, unreadable = outputs_table(folder)
    plan = plan_table(folder)
    plan_names = {c: c.replace("dropped_", "dropped: ").replace("_", " ") for c in plan.columns}
    failures = failure_table(folder)
    if len(failures):
        failures["reason"] = [FAILURE_REASONS.get(r, r) for r in failures["reason"]]
    tables = [
        table(
            plan,
            "Prompt plan",
            plan_names,
            note="Per source: rows asked for, found, kept, and dropped by why.",
        ),
        run_table(folder),
        table(outputs, "What the rows kept (per source)", index_name="source"),
        table(
            pd.DataFrame({"shard": unreadable}), "Unreadable shards (left out above; stage 4 names them too)"
        ),
        table(failures, "Failures", {"permanent": "not retried on resume"}),
        ray_actor_table(folder),
    ]
    return [t for t in tables if not t.frame.empty]


RAY_COLUMNS = ["actor", "host", "pid", "engine_capacity", "concurrency", "blocks_done", "rows", "failures"]


def ray_actor_table(folder: RunFolder) -> Table:
    """A Ray job's actors (manifest `ray`): where each ran, what it did, whether it died."""
    manifest = folder.read_manifest()
    ray = manifest.ray if manifest is not None else None
    actors = pd.DataFrame(ray.get("actors") or [] if ray else [])
    if actors.empty:
        return table(actors, "Ray actors")
    shown = actors.reindex(columns=[*RAY_COLUMNS, "server_restarts", "died"])
    shown["died"] = shown["died"].fillna("")
    note = (
        f"{ray['blocks']} blocks, {ray['blocks_handed_again']} handed again after an actor died "
        f"({ray['items_found_on_disk_when_handed_again']} of their rows already on disk, not redone)."
    )
    return table(shown, "Ray actors", {"engine_capacity": "capacity", "blocks_done": "blocks"}, note=note)
