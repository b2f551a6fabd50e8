"""Per-source tables: how many rows were asked for, generated and failed, their token counts,
how each source's completions finished (the share cut at `max_tokens` is the first sign
that the token budget is wrong), and the lengths of reasoning and answer and the tool calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import pandas as pd

from kit.artifacts import Health, SourceSummary, Summary
from kit.artifacts.record import Distribution

if TYPE_CHECKING:
    from kit.prompts.records import PlanReport

LENGTHS = ("reasoning_chars", "answer_chars", "reasoning_tokens", "answer_tokens")
"""Length columns of kit.analyse.reasoning.reasoning_parts, summarised per source."""


class ReasoningCounts(TypedDict):
    """Rows with reasoning, where it was split out (by the engine's parser, or from the text), and
    rows whose `<think>` block never closed."""

    rows: int
    from_parser: int
    from_text: int
    unterminated_think: int


class ToolCallCounts(TypedDict):
    """Of the function-calling rows: those with calls (and their share), how the calls were found
    (parsed by the engine, in the text) and the broken ones."""

    function_calling_rows: int
    rows_with_calls: int
    share_with_calls: float | None
    parsed_by_engine: int
    in_text: int
    broken: int


class OutputFigures(TypedDict):
    """What `outputs_entry` gives summary.json, for the run and for each source: the LENGTHS'
    distributions, then the reasoning and tool-call counts."""

    reasoning_chars: Distribution
    answer_chars: Distribution
    reasoning_tokens: Distribution
    answer_tokens: Distribution
    reasoning: ReasoningCounts
    tool_calls: ToolCallCounts


class _ExactRows(TypedDict, total=False):
    exact_rows: int
    """Of the rows in clusters, the exact copies (the run's count only, not a source's)."""


class ClusterCounts(_ExactRows):
    """Near-duplicate clusters of one kind (kit.analyse.neardup.cluster_counts): the clusters, the
    rows in them, and the rows beyond the first of each (what dropping them would remove)."""

    clusters: int
    rows: int
    extra_rows: int


class _NearSettings(TypedDict, total=False):
    threshold: float
    ngram: int
    num_perm: int
    bands: int
    rows_per_band: int
    """How the clusters were found (kit.analyse.scan.near_settings), added when summary.json is written."""


class NearDuplicates(_NearSettings):
    """summary.json's `near_duplicates`: the clusters of prompts and of answers, and per source the
    rows in them (`{"prompts": n, "answers": n}`)."""

    prompts: ClusterCounts
    answers: ClusterCounts
    rows_in_clusters_by_source: dict[str, dict[str, int]]


def distribution(values: pd.Series) -> dict[str, float | int | None]:
    """Total, mean, p50, p90 and max of a numeric series (NaN ignored; None when empty)."""
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return {"total": 0, "mean": None, "p50": None, "p90": None, "max": None}
    return {
        "total": int(v.sum()) if (v == v.round()).all() else round(float(v.sum()), 3),
        "mean": round(float(v.mean()), 3),
        "p50": round(float(v.quantile(0.5)), 3),
        "p90": round(float(v.quantile(0.9)), 3),
        "max": round(float(v.max()), 3),
    }


def requested_counts(plan: PlanReport | None, prompt_counts: dict[str, int]) -> pd.DataFrame:
    """Rows requested and kept (planned) per source, from plan.json, else from prompts.parquet."""
    rows = {}
    for entry in (plan or {}).get("sources") or []:
        if isinstance(entry, dict) and entry.get("source"):
            rows[entry["source"]] = {"requested": entry.get("requested"), "planned": entry.get("kept")}
    for source, n in prompt_counts.items():
        rows.setdefault(source, {"requested": None, "planned": n})
    return pd.DataFrame.from_dict(rows, orient="index", columns=["requested", "planned"])


def per_source_table(df: pd.DataFrame, failures: pd.DataFrame, requested: pd.DataFrame) -> pd.DataFrame:
    """One row per source: requested, planned, generated, failed, and token totals / p50 / p90 / max."""
    g = df.groupby("source")
    table = pd.DataFrame({"generated": g.size()})
    table["unique_ids"] = g["id"].nunique()
    for col in ("prompt_tokens", "completion_tokens"):
        table[f"{col}_total"] = g[col].sum(min_count=1)
        for q, name in ((0.5, "p50"), (0.9, "p90"), (1.0, "max")):
            table[f"{col}_{name}"] = g[col].quantile(q)
    failed = failures.groupby("source").size() if len(failures) else pd.Series(dtype=int)
    sources = sorted(set(table.index) | set(failed.index) | set(requested.index))
    table = table.reindex(sources)
    table.insert(0, "failed", failed.reindex(sources).fillna(0).astype(int))
    table.insert(0, "planned", requested["planned"].reindex(sources))
    table.insert(0, "requested", requested["requested"].reindex(sources))
    table["generated"] = table["generated"].fillna(0).astype(int)
    table.index.name = "source"
    return table


def finish_reason_table(df: pd.DataFrame, shares: bool = True) -> pd.DataFrame:
    """Finish reasons per source (rows: sources, columns: reasons): shares of rows, or counts."""
    counts = pd.crosstab(df["source"], df["finish_reason"])
    if not shares or counts.empty:
        return counts
    return counts.div(counts.sum(axis=1), axis=0).round(4)


def overall_finish_shares(df: pd.DataFrame) -> dict[str, float]:
    """Share of each finish reason over all rows."""
    if df.empty:
        return {}
    return {str(k): round(float(v), 4) for k, v in df["finish_reason"].value_counts(normalize=True).items()}


def outputs_entry(parts: pd.DataFrame, flags: pd.DataFrame) -> OutputFigures:
    """Reasoning and answer lengths, thinking and tool-call counts of some rows (`parts`: row_parts)."""
    fc = parts["function_calling"]
    with_calls = int((parts["has_call"] & fc).sum())
    return OutputFigures(
        reasoning_chars=distribution(parts["reasoning_chars"]),
        answer_chars=distribution(parts["answer_chars"]),
        reasoning_tokens=distribution(parts["reasoning_tokens"]),
        answer_tokens=distribution(parts["answer_tokens"]),
        reasoning=ReasoningCounts(
            rows=int(parts["reasoning_chars"].notna().sum()),
            from_parser=int(parts["reasoning_from"].eq("parser").sum()),
            from_text=int(parts["reasoning_from"].eq("text").sum()),
            unterminated_think=int(flags["unterminated_think"].sum()),
        ),
        tool_calls=ToolCallCounts(
            function_calling_rows=int(fc.sum()),
            rows_with_calls=with_calls,
            share_with_calls=round(with_calls / int(fc.sum()), 4) if fc.any() else None,
            parsed_by_engine=int(parts["parsed_calls"].sum()),
            in_text=int(parts["text_calls"].sum()),
            broken=int(flags["tool_call_broken"].sum()),
        ),
    )


def outputs_by_source(df: pd.DataFrame, parts: pd.DataFrame, flags: pd.DataFrame) -> dict[str, OutputFigures]:
    """`outputs_entry` per source."""
    return {
        str(s): outputs_entry(parts.loc[idx], flags.loc[idx])
        for s, idx in df.groupby("source").groups.items()
    }


def _per_source_frame(sources: dict[str, SourceSummary]) -> pd.DataFrame:
    rows = {}
    for name, s in sources.items():
        row: dict[str, float | int | None] = {
            "requested": s.requested,
            "planned": s.planned,
            "generated": s.generated,
            "failed": s.failed,
        }
        for dist, short in ((s.prompt_tokens, "prompt"), (s.completion_tokens, "completion")):
            for stat in ("total", "p50", "p90", "max"):
                row[f"{short} {stat}"] = (dist or {}).get(stat)
        rows[name] = row
    return pd.DataFrame.from_dict(rows, orient="index")


def _lengths_frame(sources: dict[str, SourceSummary]) -> pd.DataFrame:
    """Per source: p50 and p90 of reasoning and answer, in chars and tokens (max in summary.json)."""
    rows = {}
    for name, s in sources.items():
        rows[name] = {
            f"{col.replace('_', ' ')} {stat}": (getattr(s, col) or {}).get(stat)
            for col in LENGTHS
            for stat in ("p50", "p90")
        }
    return pd.DataFrame.from_dict(rows, orient="index")


def _counts_frame(sources: dict[str, SourceSummary], key: str) -> pd.DataFrame:
    """The `key` block (reasoning or tool_calls) per source, for the sources where it counted anything."""
    frame = pd.DataFrame.from_dict({s: getattr(v, key) or {} for s, v in sources.items()}, orient="index")
    counts = frame.drop(columns="share_with_calls", errors="ignore")
    if counts.empty:
        return counts
    frame[counts.columns] = counts.fillna(0).astype(int)
    return frame[counts.gt(0).any(axis=1)]


def _health_frame(health: Health) -> pd.DataFrame:
    flat = {}
    for key, value in health.to_json().items():
        if isinstance(value, dict):
            flat.update({f"{key} {k}": v for k, v in value.items() if k != "total"})
        else:
            flat[key] = value
    return pd.DataFrame({"value": pd.Series(flat, dtype=object)})


def summary_tables(summary: Summary) -> dict[str, pd.DataFrame]:
    """The summary (summary.json) as display tables, by title."""
    sources = summary.sources
    tables = {
        "per source": _per_source_frame(sources),
        "finish reasons (share of rows)": pd.DataFrame(
            {s: v.finish_reasons for s, v in sources.items()}
        ).T.fillna(0.0),
        "quality flags (rows)": pd.DataFrame({s: v.flags for s, v in sources.items()}).T,
        "thinking (rows)": _counts_frame(sources, "reasoning"),
        "reasoning and answer lengths (p50, p90)": _lengths_frame(sources),
        "tool calls (rows)": _counts_frame(sources, "tool_calls"),
        "run health": _health_frame(summary.health),
    }
    if summary.gaps:
        tables["gaps"] = pd.DataFrame({"gap": summary.gaps})
    return {k: v for k, v in tables.items() if not v.empty}
