"""Stage 4 in one call: read a run folder, compute tables, flags and health, save figures, write
summary.json. `summarise` computes without writing (used by `compare_runs`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from kit.analyse import health, load, neardup, plots, tables, tail
from kit.analyse.flags import FLAGS, flag_counts
from kit.analyse.reasoning import row_parts
from kit.analyse.scan import NEAR_KINDS, duplicated_completions, near_settings, read_rows, scan_shards
from kit.artifacts import Manifest, SourceSummary, Summary
from kit.decide.forecast.check import forecast_check
from kit.errors import RunFolderError
from kit.params import AnalyseParams
from kit.runfolder import RunFolder

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from kit.prompts.records import PlanReport


@dataclass
class RunData:
    """Everything read from one run folder, plus the gaps met while reading it.

    `df` holds each row's facts (id, source, finish reason, token counts, times; no text: see
    kit.analyse.scan), `parts` its reasoning and answer lengths and tool calls, `flags` its quality
    flags, all aligned. `rows(index)` reads the full rows (messages, completion, reasoning) back
    from the shards, only those asked for.
    """

    df: pd.DataFrame
    flags: pd.DataFrame
    failures: pd.DataFrame
    metrics: pd.DataFrame | None
    manifest: Manifest | None
    plan: PlanReport | None
    prompt_counts: dict[str, int]
    gaps: list[str] = field(default_factory=list)
    parts: pd.DataFrame | None = None
    """Per row: reasoning and answer lengths, tool-call kinds (kit.analyse.reasoning.row_parts)."""
    paths: list[Path] = field(default_factory=list)
    """The shards `df` was read from (its `shard` column indexes this list)."""
    folder: RunFolder | None = None
    """The run folder read (the tail reads its decision, params and probe); None when built by hand."""

    def row_parts(self) -> pd.DataFrame:
        """`parts`, computed on first use (a RunData built by hand from full rows)."""
        if self.parts is None:
            self.parts = row_parts(self.df)
        return self.parts

    def rows(self, index: Any = None) -> pd.DataFrame:
        """The full rows (messages, completion, reasoning, tool calls) at `index` labels of `df`
        (all rows when None: only for a small run), read from their shards."""
        facts = self.df if index is None else self.df.loc[index]
        if "shard" not in facts.columns or "completion" in facts.columns:
            return facts  # rows held in memory already
        return read_rows(self.paths, facts)


def read_run(folder: RunFolder, params: AnalyseParams | None = None, progress: bool = True) -> RunData:
    """Load every part of a run folder that can be read; each missing or corrupt part is a gap.

    Generation shards are read batch by batch and kept as facts (kit.analyse.scan).
    """
    if not folder.root.is_dir():
        raise RunFolderError(
            f"run folder {folder.root} does not exist: pass outputs/<run> of a generated run"
        )
    paths = folder.shard_paths()
    scan = scan_shards(paths, params, progress)
    gaps = [] if paths else [f"no generation shards in {folder.generations}: run stage 3 (generate) first"]
    gaps += scan.gaps + load.older_schema_gap(scan.older_rows, scan.older_shards)
    df = load.once_per_id(scan.df, gaps)
    flags, parts = scan.flags, scan.parts
    if len(df) < len(scan.df):  # once_per_id dropped repeated ids: align the rest, judge duplicates again
        kept = ~scan.df["id"].duplicated(keep="first")
        flags = flags[kept.to_numpy()].reset_index(drop=True)
        parts = parts[kept.to_numpy()].reset_index(drop=True)
        flags["duplicate"] = duplicated_completions(df["completion_hash"])
    failures, g_fail = load.load_failures(folder)
    metrics, g_met = load.load_metrics(folder)
    data, g_man = load.load_json_part(folder.manifest, "the run did not finish (or is still running)")
    manifest = Manifest.from_json(data) if data is not None else None
    plan, g_plan = load.load_json_part(folder.plan, "requested counts per source are unknown")
    prompt_counts, g_pr = load.load_prompt_counts(folder) if plan is None else ({}, [])
    if manifest is not None and not manifest.complete:
        gaps.append("manifest.json says complete: false: the run stopped before all rows were generated")
    gaps += g_fail + g_met + g_man + g_plan + g_pr
    failures = load.outstanding_failures(failures, df)
    return RunData(df, flags, failures, metrics, manifest, plan, prompt_counts, gaps, parts, paths, folder)


def _source_entry(
    row: pd.Series, finish: pd.DataFrame, flags: pd.DataFrame, outputs: dict[str, tables.OutputFigures]
) -> SourceSummary:
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
    return SourceSummary.from_json(entry)  # a source without rows has no output figures


def summarise(data: RunData) -> Summary:
    """The summary dict of one run (without figures): per source, totals, finish reasons, flags,
    health, and the tail of its last session (kit.analyse.tail)."""
    df = data.df
    requested = tables.requested_counts(data.plan, data.prompt_counts)
    per_source = tables.per_source_table(df, data.failures, requested)
    finish = tables.finish_reason_table(df) if len(df) else pd.DataFrame()
    parts = data.row_parts()
    counts = flag_counts(df, data.flags, parts) if len(df) else pd.DataFrame()
    outputs = tables.outputs_by_source(df, parts, data.flags) if len(df) else {}
    return Summary(
        rows=int(len(df)),
        sources={str(s): _source_entry(r, finish, counts, outputs) for s, r in per_source.iterrows()},
        prompt_tokens=tables.distribution(df["prompt_tokens"]),
        completion_tokens=tables.distribution(df["completion_tokens"]),
        **tables.outputs_entry(parts, data.flags),
        finish_reasons=tables.overall_finish_shares(df),
        flags={f: int(data.flags[f].sum()) for f in FLAGS},
        health=health.run_health(df, data.metrics, data.failures, data.manifest),
        tail=tail.tail_entry(data.metrics, df, data.manifest, tail.TailInputs.of(data.folder)),
        near_duplicates=near_duplicate_entry(df, data.flags),
        gaps=list(data.gaps),
    )


def with_forecast_check(summary: Summary, data: RunData) -> Summary:
    """The summary with stage 2's forecast judged against the run (when stage 2 made one)."""
    decision = data.folder.read_decision(lenient=True) if data.folder is not None else None
    tokens = int(data.df["completion_tokens"].fillna(0).sum()) if len(data.df) else 0
    check = forecast_check(decision, data.manifest, tokens, summary.tail)
    return replace(summary, forecast_check=check) if check is not None else summary


def near_duplicate_entry(df: pd.DataFrame, flags: pd.DataFrame) -> tables.NearDuplicates | None:
    """Near-duplicate clusters of prompts and of answers, in all and per source (None when stage 4
    did not look for them: `analyse.near_duplicates: false`)."""
    if not all(f"{k}_cluster" in df.columns for k in NEAR_KINDS) or "duplicate" not in flags:
        return None
    exact = flags["duplicate"].to_numpy(dtype=bool)
    by_source: dict[str, dict[str, int]] = {}
    for source, idx in df.groupby("source", observed=True).groups.items():
        rows = df.loc[idx]
        by_source[str(source)] = {
            f"{kind}s": neardup.cluster_counts(rows[f"{kind}_cluster"].to_numpy())["rows"]
            for kind in NEAR_KINDS
        }
    return tables.NearDuplicates(
        prompts=neardup.cluster_counts(df["prompt_cluster"].to_numpy(), exact),
        answers=neardup.cluster_counts(df["answer_cluster"].to_numpy(), exact),
        rows_in_clusters_by_source=by_source,
    )


def run_figures(data: RunData) -> dict[str, Figure]:
    """The figures of one run by file stem; figures with nothing to draw are left out."""
    timeline = health.throughput_timeline(data.metrics, data.df)
    counts = flag_counts(data.df, data.flags, data.row_parts()) if len(data.df) else pd.DataFrame()
    figs = {
        "completion_tokens_by_source": plots.length_distribution(data.df, "completion_tokens"),
        "prompt_tokens_by_source": plots.length_distribution(data.df, "prompt_tokens"),
        "reasoning_and_answer_by_source": plots.reasoning_and_answer(data.df, data.row_parts()),
        "finish_reasons_by_source": plots.finish_reasons(data.df),
        "throughput_over_time": plots.throughput(timeline),
        "in_flight_and_tail": tail.tail_figure(data.metrics, data.df, data.manifest),
        "latency": plots.latency(data.df),
        "accept_length_over_time": plots.accept_length(health.accept_length_timeline(data.metrics, data.df)),
        "flags_by_source": plots.counts_bar(counts.reindex(columns=list(FLAGS)), "quality flags per source"),
        "failures_by_reason": plots.counts_bar(
            health.failures_by_reason(data.failures), "failures by reason", "failures"
        ),
    }
    return {k: v for k, v in figs.items() if v is not None}


class Analysis:
    """What stage 4 computed for one run: `summary` (as written to summary.json) and `data`, the run
    as read (facts, flags and parts of every row; full rows on demand with `data.rows(index)`).

    `Analysis.opened` wraps a summary.json written earlier: `data` reads the shards on first use.
    """

    def __init__(
        self,
        summary: Summary,
        data: RunData | None = None,
        *,
        folder: RunFolder | None = None,
        params: AnalyseParams | None = None,
    ) -> None:
        if data is None and folder is None:
            raise ValueError("Analysis needs the data read, or the run folder to read it from")
        self.summary = summary
        self._data = data
        self._folder, self._params = folder, params

    @classmethod
    def opened(cls, summary: Summary, folder: RunFolder, params: AnalyseParams | None) -> Analysis:
        """A summary read from summary.json; the run's rows are read when `data` is first asked for."""
        return cls(summary, folder=folder, params=params)

    @property
    def data(self) -> RunData:
        """The run as read; read from the shards now when this Analysis was opened from summary.json."""
        if self._data is None:
            assert self._folder is not None
            self._data = read_run(self._folder, self._params)
        return self._data

    @property
    def read(self) -> bool:
        """Whether the shards have been read (by the stage, or by a first use of `data`)."""
        return self._data is not None

    def __repr__(self) -> str:
        data = "read" if self.read else "not read yet"
        return f"Analysis(run={self.summary.run!r}, rows={self.summary.rows}, data={data})"


def run_analysis(folder: RunFolder, params: AnalyseParams | None = None, progress: bool = True) -> Analysis:
    """Analyse a run folder: save figures under folder.figures, write folder.summary; return both
    the summary and the data read, so a notebook reuses them instead of reading the run again.

    Missing or corrupt parts are analysed as far as possible and named in `summary.gaps`.
    """
    data = read_run(folder, params, progress)
    analysed_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    summary = with_forecast_check(summarise(data), data)
    paths = []
    for stem, fig in run_figures(data).items():
        path = plots.save_figure(fig, folder.figure(stem))
        paths.append(str(path.resolve()))
    summary = replace(summary, run=folder.root.name, analysed_at=analysed_at, figures=paths)
    if summary.near_duplicates is not None:
        settings = near_settings(params or AnalyseParams())
        b, r = settings.bands
        about = {"threshold": settings.threshold, "ngram": settings.ngram, "num_perm": settings.num_perm}
        entry = {**about, "bands": b, "rows_per_band": r, **summary.near_duplicates}
        summary = replace(summary, near_duplicates=entry)
    folder.write_summary(summary)
    return Analysis(summary, data)


def analyse_run(folder: RunFolder, params: AnalyseParams | None = None) -> Summary:
    """`run_analysis`, returning the summary only."""
    return run_analysis(folder, params).summary
