"""Stage 4 in one call: read a run folder, compute tables, flags and health, save figures, write
summary.json. `summarise` computes without writing (used by `compare_runs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pandas as pd

from kit.analyse import health, load, plots, tables
from kit.analyse.flags import FLAGS, compute_flags, flag_counts
from kit.analyse.reasoning import row_parts
from kit.errors import RunFolderError
from kit.params import AnalyseParams
from kit.runfolder import RunFolder, write_json_atomic


@dataclass
class RunData:
    """Everything read from one run folder, plus the gaps met while reading it."""

    df: pd.DataFrame
    flags: pd.DataFrame
    failures: pd.DataFrame
    metrics: pd.DataFrame | None
    manifest: dict[str, Any] | None
    plan: dict[str, Any] | None
    prompt_counts: dict[str, int]
    gaps: list[str] = field(default_factory=list)
    parts: pd.DataFrame | None = None
    """Per row: reasoning and answer, their lengths, tool-call kinds (kit.analyse.reasoning.row_parts)."""

    def row_parts(self) -> pd.DataFrame:
        """`parts`, computed on first use."""
        if self.parts is None:
            self.parts = row_parts(self.df)
        return self.parts


def read_run(folder: RunFolder, params: AnalyseParams | None = None) -> RunData:
    """Load every part of a run folder that can be read; each missing or corrupt part is a gap."""
    if not folder.root.is_dir():
        raise RunFolderError(
            f"run folder {folder.root} does not exist: pass outputs/<run> of a generated run"
        )
    df, gaps = load.load_generations(folder)
    failures, g_fail = load.load_failures(folder)
    metrics, g_met = load.load_metrics(folder)
    manifest, g_man = load.load_json_part(folder.manifest, "the run did not finish (or is still running)")
    plan, g_plan = load.load_json_part(folder.plan, "requested counts per source are unknown")
    prompt_counts, g_pr = load.load_prompt_counts(folder) if plan is None else ({}, [])
    if manifest is not None and not manifest.get("complete", False):
        gaps.append("manifest.json says complete: false: the run stopped before all rows were generated")
    gaps += g_fail + g_met + g_man + g_plan + g_pr
    parts = row_parts(df)
    flags = compute_flags(df, params, parts)
    failures = load.outstanding_failures(failures, df)
    return RunData(df, flags, failures, metrics, manifest, plan, prompt_counts, gaps, parts)


def _source_entry(
    row: pd.Series, finish: pd.DataFrame, flags: pd.DataFrame, outputs: dict[str, Any]
) -> dict[str, Any]:
    source = row.name

    def num(key: str) -> Any:
        v = row.get(key)
        return None if v is None or pd.isna(v) else (int(v) if float(v).is_integer() else float(v))

    entry = {k: num(k) for k in ("requested", "planned", "generated", "failed", "unique_ids")}
    for col in ("prompt_tokens", "completion_tokens"):
        entry[col] = {s: num(f"{col}_{s}") for s in ("total", "p50", "p90", "max")}
    entry["finish_reasons"] = (
        {str(k): float(v) for k, v in finish.loc[source].items() if v} if source in finish.index else {}
    )
    entry["flags"] = {str(k): int(v) for k, v in flags.loc[source].items()} if source in flags.index else {}
    entry.update(outputs.get(source) or {})
    return entry


def summarise(data: RunData) -> dict[str, Any]:
    """The summary dict of one run (without figures): per source, totals, finish reasons, flags, health."""
    df = data.df
    requested = tables.requested_counts(data.plan, data.prompt_counts)
    per_source = tables.per_source_table(df, data.failures, requested)
    finish = tables.finish_reason_table(df) if len(df) else pd.DataFrame()
    counts = flag_counts(df, data.flags) if len(df) else pd.DataFrame()
    parts = data.row_parts()
    outputs = tables.outputs_by_source(df, parts, data.flags) if len(df) else {}
    return {
        "rows": int(len(df)),
        "sources": {str(s): _source_entry(r, finish, counts, outputs) for s, r in per_source.iterrows()},
        "prompt_tokens": tables.distribution(df["prompt_tokens"]),
        "completion_tokens": tables.distribution(df["completion_tokens"]),
        **tables.outputs_entry(parts, data.flags),
        "finish_reasons": tables.overall_finish_shares(df),
        "flags": {f: int(data.flags[f].sum()) for f in FLAGS},
        "health": health.run_health(df, data.metrics, data.failures, data.manifest),
        "gaps": list(data.gaps),
    }


def run_figures(data: RunData) -> dict[str, Any]:
    """The figures of one run by file stem; figures with nothing to draw are left out."""
    timeline = health.throughput_timeline(data.metrics, data.df)
    counts = flag_counts(data.df, data.flags) if len(data.df) else pd.DataFrame()
    figs = {
        "completion_tokens_by_source": plots.length_distribution(data.df, "completion_tokens"),
        "prompt_tokens_by_source": plots.length_distribution(data.df, "prompt_tokens"),
        "reasoning_and_answer_by_source": plots.reasoning_and_answer(data.df, data.row_parts()),
        "finish_reasons_by_source": plots.finish_reasons(data.df),
        "throughput_over_time": plots.throughput(timeline),
        "latency": plots.latency(data.df),
        "accept_length_over_time": plots.accept_length(health.accept_length_timeline(data.metrics, data.df)),
        "flags_by_source": plots.counts_bar(counts.reindex(columns=list(FLAGS)), "quality flags per source"),
        "failures_by_reason": plots.counts_bar(
            health.failures_by_reason(data.failures), "failures by reason", "failures"
        ),
    }
    return {k: v for k, v in figs.items() if v is not None}


def analyse_run(folder: RunFolder, params: AnalyseParams | None = None) -> dict[str, Any]:
    """Analyse a run folder: save figures under folder.figures, write folder.summary, return the summary.

    Missing or corrupt parts are analysed as far as possible and named in `summary["gaps"]`.
    """
    data = read_run(folder, params)
    summary = {
        "run": folder.root.name,
        "analysed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    summary.update(summarise(data))
    paths = []
    for stem, fig in run_figures(data).items():
        path = plots.save_figure(fig, folder.figure(stem))
        paths.append(str(path.resolve()))
    summary["figures"] = paths
    write_json_atomic(folder.summary, summary)
    return summary
