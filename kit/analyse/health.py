"""Run health: throughput over time, request latency, failures by reason, accept length.

The timeline comes from `metrics.parquet` when the run wrote it; otherwise it is rebuilt from the
rows' `finished_at` stamps, so a run without metrics still shows how it went.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kit.analyse.tables import distribution
from kit.artifacts import Health, Manifest


def timeline_from_rows(df: pd.DataFrame, bin_s: float | None = None) -> pd.DataFrame:
    """A metrics-like timeline (t_s, rows_done, output_tokens_done, rows_s, tok_s) from `finished_at`."""
    done = df.dropna(subset=["finished_at"]).sort_values("finished_at")
    if done.empty:
        return pd.DataFrame(columns=["t_s", "rows_done", "output_tokens_done", "rows_s", "tok_s"])
    t = (done["finished_at"] - done["finished_at"].iloc[0]).dt.total_seconds()
    span = float(t.iloc[-1]) or 1.0
    bin_s = bin_s or max(span / 50, 1.0)
    bins = (t // bin_s).astype(int)
    g = done.groupby(bins)
    out = pd.DataFrame({"rows": g.size(), "tokens": g["completion_tokens"].sum()})
    out = out.reindex(range(int(bins.max()) + 1), fill_value=0)
    return pd.DataFrame(
        {
            "t_s": (out.index + 1) * bin_s,
            "rows_done": out["rows"].cumsum(),
            "output_tokens_done": out["tokens"].cumsum(),
            "rows_s": out["rows"] / bin_s,
            "tok_s": out["tokens"] / bin_s,
        }
    ).reset_index(drop=True)


def throughput_timeline(metrics: pd.DataFrame | None, df: pd.DataFrame) -> pd.DataFrame:
    """rows/s and tok/s over time: from metrics (rates filled from the counters where absent), else rows."""
    if metrics is None or metrics.empty:
        return timeline_from_rows(df)
    m = metrics.copy()
    dt = m["t_s"].diff()
    for rate, counter in (("rows_s", "rows_done"), ("tok_s", "output_tokens_done")):
        if rate not in m.columns and counter in m.columns:
            m[rate] = m[counter].diff() / dt
    return m


def accept_length_timeline(metrics: pd.DataFrame | None, df: pd.DataFrame) -> pd.DataFrame:
    """Accept length over time (t_s, accept_length) from metrics, else from per-row values; may be empty."""
    if metrics is not None and "accept_length" in metrics.columns:
        out = metrics[["t_s", "accept_length"]].dropna()
        if len(out):
            return out
    rows = df.dropna(subset=["accept_length", "finished_at"]).sort_values("finished_at")
    if rows.empty:
        return pd.DataFrame(columns=["t_s", "accept_length"])
    t = (rows["finished_at"] - rows["finished_at"].iloc[0]).dt.total_seconds()
    return pd.DataFrame({"t_s": t.values, "accept_length": rows["accept_length"].values})


def failures_by_reason(failures: pd.DataFrame) -> pd.DataFrame:
    """Failure counts per source and reason (rows: sources, columns: reasons)."""
    if failures.empty:
        return pd.DataFrame()
    return pd.crosstab(failures["source"], failures["reason"])


def _mean(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return round(float(v.mean()), 3) if len(v) else None


def _duration_s(df: pd.DataFrame, timeline: pd.DataFrame, manifest: Manifest | None) -> float | None:
    """Seconds spent generating, summed over the sessions of a resumed run (downtime excluded).

    The manifest's `generating_s` comes from each session's own clock; without it the span of
    each session's samples is used (load_metrics rebases `t_s` on the wall clock across sessions,
    so a session's time is its last sample minus its first, not its last sample).
    """
    if manifest is not None and manifest.generating_s:
        return float(manifest.generating_s)
    if {"session", "t_s"} <= set(timeline.columns) and len(timeline):
        spans = timeline.groupby("session")["t_s"].agg(lambda t: t.max() - t.min())
        return float(spans.sum())
    if manifest is not None and manifest.started_at and manifest.finished_at:
        start = pd.to_datetime(manifest.started_at, errors="coerce", utc=True)
        end = pd.to_datetime(manifest.finished_at, errors="coerce", utc=True)
        if pd.notna(start) and pd.notna(end):
            return float((end - start).total_seconds())
    if len(timeline):
        return float(timeline["t_s"].max())
    return None


PEAK_WINDOW_S = 60.0
"""The shortest span a peak rate is taken over (longer where requests live longer: `peak_window`): a
timeline sample's own rate (tokens count when a row finishes) read 616 tok/s beside a mean of 160."""


def peak_window(latency: dict | None) -> float:
    """The span a peak is measured over: `PEAK_WINDOW_S`, or the p90 request latency where longer (a
    shorter span reads bursts of rows finishing together)."""
    p90 = (latency or {}).get("p90")
    return max(PEAK_WINDOW_S, float(p90)) if p90 is not None and not pd.isna(p90) else PEAK_WINDOW_S


def sustained_peak(timeline: pd.DataFrame, window: float) -> float | None:
    """The highest output tokens/s over any span of the timeline (within one session) at least `window`
    long, from its token counter; None where no session lasted that long."""
    if not {"t_s", "output_tokens_done"} <= set(timeline.columns) or timeline.empty:
        return None
    sessions = timeline.groupby("session") if "session" in timeline.columns else [(None, timeline)]
    best: float | None = None
    for _, g in sessions:
        g = g.dropna(subset=["t_s", "output_tokens_done"]).sort_values("t_s")
        t, tok = g["t_s"].to_numpy(float), g["output_tokens_done"].to_numpy(float)
        j = np.searchsorted(t, t - window, side="right") - 1  # the latest point a window back
        ok = j >= 0
        if ok.any():
            rates = (tok[ok] - tok[j[ok]]) / (t[ok] - t[j[ok]])
            best = max(float(rates.max()), best if best is not None else -np.inf)
    return best


def run_health(
    df: pd.DataFrame, metrics: pd.DataFrame | None, failures: pd.DataFrame, manifest: Manifest | None
) -> Health:
    """Headline health numbers: duration, rows/s, tok/s (mean, and the peak sustained over a window:
    `sustained_peak`), latency, failures, accept length."""
    timeline = throughput_timeline(metrics, df)
    duration = _duration_s(df, timeline, manifest)
    tokens = float(pd.to_numeric(df["completion_tokens"], errors="coerce").sum())
    latency = distribution(df["latency_s"])
    window = peak_window(latency)
    peak = sustained_peak(timeline, window)
    return Health(
        complete=bool(manifest.complete) if manifest is not None else False,
        duration_s=round(duration, 3) if duration else None,
        rows_s=round(len(df) / duration, 3) if duration else None,
        output_tok_s=round(tokens / duration, 3) if duration else None,
        output_tok_s_peak=round(float(peak), 3) if peak is not None and pd.notna(peak) else None,
        output_tok_s_peak_window_s=round(window, 1),
        latency_s=latency,
        ttft_s=distribution(df["ttft_s"]),
        failures=int(len(failures)),
        failures_by_reason={str(k): int(v) for k, v in failures["reason"].value_counts().items()}
        if len(failures)
        else {},
        duplicate_ids=int(df.duplicated(subset=["id", "sample_index"]).sum()) if len(df) else 0,
        accept_length_mean=_mean(accept_length_timeline(metrics, df)["accept_length"]),
        timeline_from="metrics.parquet" if metrics is not None and len(metrics) else "rows",
    )
